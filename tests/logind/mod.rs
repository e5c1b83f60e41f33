//! Test support: a private D-Bus system bus with the fake logind (`fake_logind.py`) on it, one per
//! test, torn down on drop; and a `NOTIFY_SOCKET` listener that records what a daemon tells systemd.
//!
//! Nothing here touches the machine's own system bus: every address points into a temp dir.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The system python that has the dbus and gi modules (the one first on PATH may not).
pub const SYSTEM_PYTHON: &str = "/usr/bin/python3";
const BUS_NAME: &str = "org.freedesktop.login1";
const PATH: &str = "/org/freedesktop/login1";
const MANAGER: &str = "org.freedesktop.login1.Manager";
const MOCK: &str = "org.freedesktop.DBus.Mock";

/// The start of the one line a test binary writes to stderr when its tests skip for a missing
/// tool: `scripts/test` counts these lines in the cargo output and names the binaries.
pub const SKIP_PREFIX: &str = "kube-shutdown-drain tests: SKIPPED test binary";

/// Skips (returns false) when `ok` is false, unless `CI=true`, where the missing piece is a
/// failure. The first skip of a test binary writes one line ([`SKIP_PREFIX`]) straight to
/// stderr, past libtest's capture, so a plain `cargo test` shows it once per binary, not a
/// green run that hides what it did not run.
pub fn require(ok: bool, what: &str) -> bool {
    if ok {
        return true;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("CI=true and {what} is missing (scripts/install-deps installs it)");
    }
    eprintln!("skipping: {what} is missing (run scripts/install-deps)");
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "{SKIP_PREFIX} {}: {what} is missing (run scripts/install-deps); its tests that \
             need it pass without running",
            test_binary()
        );
    });
    false
}

/// The test binary's name without cargo's hash (`daemon_gate` of `daemon_gate-0f3a...`).
fn test_binary() -> String {
    let exe = std::env::args().next().unwrap_or_default();
    let name = Path::new(&exe)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or(exe);
    match name.rsplit_once('-') {
        Some((binary, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => binary.to_owned(),
        _ => name,
    }
}

/// True when `dbus-daemon` and python-dbusmock (with its gi dependency) are installed.
pub fn available() -> bool {
    let bus = Command::new("dbus-daemon")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let mock = Command::new(SYSTEM_PYTHON)
        .args(["-c", "import dbusmock, dbus, gi"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    require(bus, "dbus-daemon (Debian package dbus)")
        && require(mock, "python3-dbusmock / python3-gi for /usr/bin/python3")
}

/// The fake logind's template, by absolute path.
pub fn template_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/logind/fake_logind.py")
}

/// How the fake logind starts.
#[derive(Debug, Clone)]
pub struct LogindOptions {
    pub delay_max: Duration,
    pub preparing_for_shutdown: bool,
    /// The kind of the shutdown already under way (with `preparing_for_shutdown`).
    pub kind: String,
    /// Whether the fake has systemd >= 257's metadata signal and property.
    pub metadata: bool,
    /// Whether a `block` lock refuses root's reboot too (systemd >= 257).
    pub block_binds_root: bool,
}

impl Default for LogindOptions {
    fn default() -> Self {
        LogindOptions {
            delay_max: Duration::from_secs(20),
            preparing_for_shutdown: false,
            kind: "reboot".to_owned(),
            metadata: true,
            block_binds_root: true,
        }
    }
}

/// One line of the fake logind's result file.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// `released`, `timeout`, `no-locks` or `cancelled`.
    pub what: String,
    /// Seconds from `PrepareForShutdown(true)` to the outcome.
    pub elapsed: f64,
    pub line: String,
}

/// A private bus and the fake logind on it, and the keeper of the fake's lock table (which
/// outlives restarts of the bus, as logind's locks outlive a D-Bus restart). All three
/// processes are killed on drop.
pub struct Rig {
    dir: tempfile::TempDir,
    bus: Child,
    logind: Option<Child>,
    /// The fake systemd manager, when a test started one ([`Rig::start_systemd`]).
    systemd: Option<Child>,
    /// The fake update_engine, when a test started one ([`Rig::start_update_engine`]).
    update_engine: Option<Child>,
    keeper: Child,
    options: LogindOptions,
    address: String,
}

fn bus_config(socket: &Path) -> String {
    format!(
        r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
        socket.display()
    )
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

impl Rig {
    /// Starts a bus and the fake logind; `None` (after printing why) when the tools are missing.
    pub async fn start(options: LogindOptions) -> Option<Rig> {
        if !available() {
            return None;
        }
        let dir = tempfile::Builder::new()
            .prefix("ksd-bus-")
            .tempdir()
            .expect("a temp dir");
        let socket = dir.path().join("system_bus_socket");
        let address = format!("unix:path={}", socket.display());
        let bus = start_bus(dir.path(), &socket);
        let keeper = start_keeper(&dir.path().join("lock-keeper.sock"));
        let mut rig = Rig {
            dir,
            bus,
            logind: None,
            systemd: None,
            update_engine: None,
            keeper,
            options,
            address,
        };
        rig.start_logind().await;
        Some(rig)
    }

    /// `unix:path=...` of the private bus; give it to clients as `DBUS_SYSTEM_BUS_ADDRESS`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The temp dir holding the bus socket and the result file; tests may put files there too.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn result_file(&self) -> PathBuf {
        self.dir.path().join("logind-result")
    }

    async fn start_logind(&mut self) {
        let params = serde_json::json!({
            "InhibitDelayMaxUSec": self.options.delay_max.as_micros() as u64,
            "PreparingForShutdown": self.options.preparing_for_shutdown,
            "kind": self.options.kind,
            "metadata": self.options.metadata,
            "block_binds_root": self.options.block_binds_root,
            "result_file": self.result_file(),
            "keeper": self.dir.path().join("lock-keeper.sock"),
        });
        self.logind = Some(self.spawn_mock(&template_path(), &params, "logind.log"));
        self.wait_for_name(BUS_NAME, "logind.log").await;
    }

    /// Starts python-dbusmock with `template` and `params` on the bus, its stderr in `log` (in
    /// the rig's dir).
    fn spawn_mock(&self, template: &Path, params: &serde_json::Value, log: &str) -> Child {
        let log = std::fs::File::create(self.dir.path().join(log)).expect("a log file");
        Command::new(SYSTEM_PYTHON)
            .args(["-m", "dbusmock", "--system", "-t"])
            .arg(template)
            .arg("-p")
            .arg(params.to_string())
            .env("DBUS_SYSTEM_BUS_ADDRESS", &self.address)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start python-dbusmock with {}: {e}", template.display()))
    }

    /// Waits until `name` is owned on the bus; fails with the fake's log `log` after 20 s.
    async fn wait_for_name(&self, name: &str, log: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(conn) = self.connection().await {
                let owned: Result<bool, _> = conn
                    .call_method(
                        Some("org.freedesktop.DBus"),
                        "/org/freedesktop/DBus",
                        Some("org.freedesktop.DBus"),
                        "NameHasOwner",
                        &(name,),
                    )
                    .await
                    .and_then(|m| m.body().deserialize::<bool>());
                if owned == Ok(true) {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "{name} did not appear on the bus within 20 s; its log: {}",
                std::fs::read_to_string(self.dir.path().join(log)).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Starts the fake systemd manager (`fake_systemd.py`) on the bus: `SystemState` `state`,
    /// the daemon's unit with `TimeoutStopUSec` `stop_timeout`.
    pub async fn start_systemd(&mut self, state: &str, stop_timeout: Duration) {
        self.start_systemd_version(state, stop_timeout, "257.13-1")
            .await;
    }

    /// [`Rig::start_systemd`], with the manager's `Version`.
    pub async fn start_systemd_version(
        &mut self,
        state: &str,
        stop_timeout: Duration,
        version: &str,
    ) {
        let params = serde_json::json!({
            "SystemState": state,
            "TimeoutStopUSec": stop_timeout.as_micros() as u64,
            "Version": version,
        });
        let template = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/logind/fake_systemd.py");
        self.systemd = Some(self.spawn_mock(&template, &params, "systemd.log"));
        self.wait_for_name("org.freedesktop.systemd1", "systemd.log")
            .await;
    }

    /// Starts the fake Flatcar update_engine (`fake_update_engine.py`) on the bus, reporting
    /// `operation` (e.g. `UPDATE_STATUS_IDLE`).
    pub async fn start_update_engine(&mut self, operation: &str) {
        let params = serde_json::json!({ "CurrentOperation": operation });
        let template =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/logind/fake_update_engine.py");
        self.update_engine = Some(self.spawn_mock(&template, &params, "update_engine.log"));
        self.wait_for_name("com.coreos.update1", "update_engine.log")
            .await;
    }

    /// Makes the fake update_engine report `operation` (and `new_version`) and send its
    /// `StatusUpdate` signal.
    pub async fn set_update_status(&self, operation: &str, new_version: &str) {
        let conn = self.connection().await.expect("connect to the private bus");
        conn.call_method(
            Some("com.coreos.update1"),
            "/com/coreos/update1",
            Some(MOCK),
            "SetStatus",
            &(operation, new_version),
        )
        .await
        .unwrap_or_else(|e| panic!("fake update_engine SetStatus: {e}"));
    }

    /// Changes the fake systemd's `SystemState` (`stopping`: the system shuts down).
    pub async fn set_system_state(&self, state: &str) {
        let conn = self.connection().await.expect("connect to the private bus");
        conn.call_method(
            Some("org.freedesktop.systemd1"),
            "/org/freedesktop/systemd1",
            Some(MOCK),
            "SetSystemState",
            &(state,),
        )
        .await
        .unwrap_or_else(|e| panic!("fake systemd SetSystemState: {e}"));
    }

    /// Makes the fake systemd's unit report `PrivateUsers=word` (`self`, `identity`, `no`); the
    /// empty word is a systemd older than 257 with `PrivateUsers=yes` (no `PrivateUsersEx`).
    pub async fn set_private_users(&self, word: &str) {
        let conn = self.connection().await.expect("connect to the private bus");
        conn.call_method(
            Some("org.freedesktop.systemd1"),
            "/org/freedesktop/systemd1",
            Some(MOCK),
            "SetPrivateUsers",
            &(word,),
        )
        .await
        .unwrap_or_else(|e| panic!("fake systemd SetPrivateUsers: {e}"));
    }

    /// Kills the bus daemon and the fake logind, then starts both again on the same socket:
    /// what a `systemctl restart dbus` looks like to a client. The locks granted before are
    /// still held (the keeper hands them to the new fake), as real logind keeps them.
    pub async fn restart_bus(&mut self) {
        if let Some(mut logind) = self.logind.take() {
            kill(&mut logind);
        }
        if let Some(mut systemd) = self.systemd.take() {
            kill(&mut systemd);
        }
        kill(&mut self.bus);
        let socket = self.dir.path().join("system_bus_socket");
        let _ = std::fs::remove_file(&socket);
        self.bus = start_bus(self.dir.path(), &socket);
        self.start_logind().await;
    }

    /// Kills the bus daemon and the fake logind and leaves them down (clients see the bus gone
    /// and cannot reconnect) until [`Rig::start_bus_again`].
    pub fn stop_bus(&mut self) {
        if let Some(mut logind) = self.logind.take() {
            kill(&mut logind);
        }
        kill(&mut self.bus);
        let _ = std::fs::remove_file(self.dir.path().join("system_bus_socket"));
    }

    /// After [`Rig::stop_bus`]: starts the bus on the same socket and a fake logind started with
    /// `options` (e.g. still preparing the shutdown that was under way).
    pub async fn start_bus_again(&mut self, options: LogindOptions) {
        assert!(self.logind.is_none(), "stop_bus first");
        self.options = options;
        let socket = self.dir.path().join("system_bus_socket");
        self.bus = start_bus(self.dir.path(), &socket);
        self.start_logind().await;
    }

    /// A fresh client connection to the private bus.
    pub async fn connection(&self) -> zbus::Result<zbus::Connection> {
        zbus::connection::Builder::address(self.address.as_str())
            .build()
            .await
    }

    async fn call<B>(&self, iface: &str, method: &str, body: &B) -> zbus::Message
    where
        B: serde::Serialize + zbus::DynamicType,
    {
        let conn = self.connection().await.expect("connect to the private bus");
        conn.call_method(Some(BUS_NAME), PATH, Some(iface), method, body)
            .await
            .unwrap_or_else(|e| panic!("fake logind {iface}.{method}: {e}"))
    }

    /// `Reboot(false)`: starts the fake's delayed shutdown.
    pub async fn reboot(&self) {
        self.call(MANAGER, "Reboot", &(false,)).await;
    }

    /// `Reboot(false)` as `systemctl reboot` makes it: logind's answer (a block lock refuses).
    pub async fn try_reboot(&self) -> zbus::Result<()> {
        let conn = self.connection().await?;
        conn.call_method(Some(BUS_NAME), PATH, Some(MANAGER), "Reboot", &(false,))
            .await
            .map(|_| ())
    }

    /// `Reboot(false)` as an unprivileged user makes it (`nobody`, through `setpriv` and
    /// `dbus-send`): `Ok`, or the error `dbus-send` printed. `None` when this test does not run
    /// as root and cannot change user.
    pub async fn try_reboot_unprivileged(&self) -> Option<Result<(), String>> {
        use std::os::unix::fs::PermissionsExt;
        if !nix::unistd::Uid::effective().is_root() {
            return None;
        }
        // nobody reaches the bus socket through the rig's dir (the socket itself is 0777).
        std::fs::set_permissions(self.dir.path(), std::fs::Permissions::from_mode(0o711))
            .expect("open the rig's dir to other users");
        let out = tokio::process::Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                "dbus-send",
            ])
            .arg(format!("--bus={}", self.address))
            .args([
                "--print-reply",
                "--dest=org.freedesktop.login1",
                PATH,
                "org.freedesktop.login1.Manager.Reboot",
                "boolean:false",
            ])
            .output()
            .await
            .expect("run setpriv dbus-send");
        Some(if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        })
    }

    /// `PowerOff(false)`.
    pub async fn power_off(&self) {
        self.call(MANAGER, "PowerOff", &(false,)).await;
    }

    /// Starts the fake's delayed shutdown of `kind` (the metadata's `type`: "halt", "kexec",
    /// "soft-reboot", ...), as `reboot` and `power_off` do for theirs.
    pub async fn start_shutdown(&self, kind: &str) {
        self.call(MOCK, "StartShutdown", &(kind,)).await;
    }

    /// Emits `PrepareForShutdown(false)`.
    pub async fn cancel(&self) {
        self.call(MOCK, "CancelShutdown", &()).await;
    }

    /// Clears the shutdown state, as logind after the machine came back.
    pub async fn simulate_boot(&self) {
        self.call(MOCK, "SimulateBoot", &()).await;
    }

    /// Changes `InhibitDelayMaxUSec` while the fake runs (what logind's SIGHUP re-read does).
    pub async fn set_delay_max(&self, max: Duration) {
        self.call(MOCK, "SetInhibitDelayMax", &(max.as_micros() as u64,))
            .await;
    }

    /// The `Inhibit` calls the fake refused during a shutdown ("WHO WHAT MODE"), oldest first.
    pub async fn refused(&self) -> Vec<String> {
        self.call(MOCK, "Refused", &())
            .await
            .body()
            .deserialize()
            .expect("Refused answers as")
    }

    /// Refusals of our daemon's lock (who = kube-shutdown-drain).
    pub async fn our_refusals(&self) -> usize {
        self.refused()
            .await
            .iter()
            .filter(|r| r.starts_with("kube-shutdown-drain "))
            .count()
    }

    /// The `Inhibit` calls this fake logind granted since it started ("WHO WHAT MODE").
    pub async fn granted(&self) -> Vec<String> {
        self.call(MOCK, "Granted", &())
            .await
            .body()
            .deserialize()
            .expect("Granted answers as")
    }

    /// Locks this fake logind granted our daemon (who = kube-shutdown-drain) since it started.
    pub async fn our_grants(&self) -> usize {
        self.granted()
            .await
            .iter()
            .filter(|g| g.starts_with("kube-shutdown-drain "))
            .count()
    }

    /// While `hang`, the fake never answers an `Inhibit` in mode `block`.
    pub async fn hang_block_inhibit(&self, hang: bool) {
        self.call(MOCK, "HangBlockInhibit", &(hang,)).await;
    }

    /// How many `Inhibit` calls [`Rig::hang_block_inhibit`] left unanswered.
    pub async fn unanswered(&self) -> u32 {
        self.call(MOCK, "Unanswered", &())
            .await
            .body()
            .deserialize()
            .expect("Unanswered answers u")
    }

    /// Stages the race of issue 13: the next `Inhibit` on "shutdown" first starts a reboot (so
    /// a `PreparingForShutdown` read before it said false), then is refused.
    pub async fn reboot_on_next_inhibit(&self) {
        self.call(MOCK, "RebootOnNextInhibit", &()).await;
    }

    /// Takes a delay lock as another program (`who`), like the kubelet's; held until dropped.
    pub async fn foreign_lock(&self, who: &str) -> std::os::fd::OwnedFd {
        self.foreign_lock_in(who, "delay").await
    }

    /// [`Rig::foreign_lock`] in `mode` (`block`: a lock that refuses shutdowns).
    pub async fn foreign_lock_in(&self, who: &str, mode: &str) -> std::os::fd::OwnedFd {
        let reply = self
            .call(
                MANAGER,
                "Inhibit",
                &("shutdown", who, "a test holds a second lock", mode),
            )
            .await;
        let fd: zbus::OwnedFd = reply.body().deserialize().expect("Inhibit answers h");
        std::os::fd::OwnedFd::from(fd)
    }

    /// `ListInhibitors`: (what, who, why, mode, uid, pid).
    pub async fn inhibitors(&self) -> Vec<(String, String, String, String, u32, u32)> {
        self.call(MANAGER, "ListInhibitors", &())
            .await
            .body()
            .deserialize()
            .expect("ListInhibitors answers a(ssssuu)")
    }

    /// Our daemon's locks (who = kube-shutdown-drain, delay on shutdown).
    pub async fn our_locks(&self) -> usize {
        self.inhibitors()
            .await
            .iter()
            .filter(|(what, who, _, mode, _, _)| {
                who == "kube-shutdown-drain" && what == "shutdown" && mode == "delay"
            })
            .count()
    }

    /// Polls `ListInhibitors` until our lock count is `want`, or `within` passes.
    pub async fn wait_locks(&self, want: usize, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if self.our_locks().await == want {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Every outcome the fake logind wrote so far.
    pub fn outcomes(&self) -> Vec<Outcome> {
        let text = std::fs::read_to_string(self.result_file()).unwrap_or_default();
        text.lines()
            .map(|line| {
                let mut words = line.split_whitespace();
                let what = words.next().unwrap_or_default().to_owned();
                let elapsed = words
                    .next()
                    .and_then(|w| w.parse().ok())
                    .unwrap_or(f64::NAN);
                Outcome {
                    what,
                    elapsed,
                    line: line.to_owned(),
                }
            })
            .collect()
    }

    /// Waits for outcome number `n` (0-based) to be written, up to `within`.
    pub async fn wait_outcome(&self, n: usize, within: Duration) -> Option<Outcome> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(outcome) = self.outcomes().into_iter().nth(n) {
                return Some(outcome);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Starts `lock_keeper.py` listening on `socket`; returns once it listens.
fn start_keeper(socket: &Path) -> Child {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/logind/lock_keeper.py");
    let child = Command::new(SYSTEM_PYTHON)
        .arg(script)
        .arg(socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the lock keeper");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "the lock keeper did not listen within 10 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    child
}

fn start_bus(dir: &Path, socket: &Path) -> Child {
    let config = dir.join("bus.conf");
    std::fs::write(&config, bus_config(socket)).expect("write the bus config");
    let mut child = Command::new("dbus-daemon")
        .arg(format!("--config-file={}", config.display()))
        .args(["--nofork", "--print-address"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start dbus-daemon");
    // The address is printed once the socket listens.
    let stdout = child.stdout.take().expect("piped stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("read the bus address");
    assert!(
        line.starts_with("unix:path="),
        "dbus-daemon printed {line:?}"
    );
    child
}

impl Drop for Rig {
    fn drop(&mut self) {
        if let Some(mut logind) = self.logind.take() {
            kill(&mut logind);
        }
        if let Some(mut update_engine) = self.update_engine.take() {
            kill(&mut update_engine);
        }
        kill(&mut self.bus);
        kill(&mut self.keeper);
    }
}

/// A `NOTIFY_SOCKET` that records the daemon's sd_notify messages.
///
/// The daemon's `sd_notify` blocks once the socket's queue (`net.unix.max_dgram_qlen`, often 10
/// datagrams) is full, as under a systemd that never reads: every wait of a test world drains it
/// ([`NotifySocket::drain`]), so no test has to remember to.
pub struct NotifySocket {
    path: PathBuf,
    socket: tokio::net::UnixDatagram,
    messages: std::sync::Mutex<Vec<String>>,
}

impl NotifySocket {
    pub fn bind(dir: &Path) -> NotifySocket {
        let path = dir.join("notify.sock");
        let _ = std::fs::remove_file(&path);
        let std_socket = UnixDatagram::bind(&path).expect("bind the notify socket");
        std_socket.set_nonblocking(true).expect("non-blocking");
        NotifySocket {
            path,
            socket: tokio::net::UnixDatagram::from_std(std_socket).expect("a tokio socket"),
            messages: std::sync::Mutex::default(),
        }
    }

    /// The value for `NOTIFY_SOCKET`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Receives whatever is queued now; returns every message received so far.
    pub fn drain(&self) -> Vec<String> {
        let mut messages = self.messages.lock().unwrap_or_else(|p| p.into_inner());
        let mut buf = vec![0u8; 4096];
        while let Ok(n) = self.socket.try_recv(&mut buf) {
            messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        messages.clone()
    }

    /// Drains the socket whenever a message comes, until the task is aborted: the daemon never
    /// blocks on a full queue, whatever the test is waiting for.
    pub fn keep_drained(self: &std::sync::Arc<Self>) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            while me.socket.readable().await.is_ok() {
                me.drain();
            }
        })
    }

    /// Forgets the messages received so far.
    pub fn clear(&self) {
        self.drain();
        self.messages
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// Receives until a message has the line `needle` (such as `READY=1`), up to `within`.
    /// Returns that message.
    pub async fn wait_for(&self, needle: &str, within: Duration) -> Option<String> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(m) = self
                .drain()
                .into_iter()
                .find(|m| m.lines().any(|l| l == needle))
            {
                return Some(m);
            }
            tokio::time::timeout_at(deadline, self.socket.readable())
                .await
                .ok()?
                .expect("poll the notify socket");
        }
    }

    /// Receives until a `STATUS=` line contains `part`, up to `within`; every status so far.
    pub async fn wait_status(&self, part: &str, within: Duration) -> Result<(), Vec<String>> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let statuses = self.statuses();
            if statuses.iter().any(|s| s.contains(part)) {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, self.socket.readable()).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => panic!("poll the notify socket: {e}"),
                Err(_) => return Err(statuses),
            }
        }
    }

    /// Status lines (`STATUS=...`) received so far, and any waiting now.
    pub fn statuses(&self) -> Vec<String> {
        self.drain()
            .iter()
            .flat_map(|m| m.lines())
            .filter_map(|l| l.strip_prefix("STATUS="))
            .map(str::to_owned)
            .collect()
    }
}
