# Shared by scripts/demo and scripts/demo-idle-cost (sourced, not run): a private D-Bus system
# bus, the fake logind on it, the fake API server seeded with demo/seed.json, and the daemon.
# Everything lives in $work and is stopped by demo_cleanup (install it with trap ... EXIT).
# Nothing here talks to the machine's own system bus: every D-Bus call names $bus_address.

demo_pids=()
work=""
bus_address=""
api_url=""
kubeconfig=""
kubectl=""
daemon_pid=""
daemon_run=0

# Colour only on a terminal.
if [ -t 1 ]; then bold=$'\033[1m'; dim=$'\033[2m'; reset=$'\033[0m'; else bold=""; dim=""; reset=""; fi

say() { printf '\n%s== %s%s\n' "$bold" "$*" "$reset"; }
note() { printf '%s   %s%s\n' "$dim" "$*" "$reset"; }
fail() { printf 'demo: FAILED %s\n' "$*"; exit 1; }

demo_cleanup() {
  local pid
  for pid in "${demo_pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${demo_pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  [ -n "$work" ] && rm -rf "$work"
}

# Waits up to $1 seconds for the command in $2.. to succeed.
wait_for() {
  local limit=$1; shift
  local end=$(( $(date +%s%N) + limit * 1000000000 ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s%N)" -lt "$end" ] || return 1
    sleep 0.05
  done
}

demo_setup() {
  work=$(mktemp -d /tmp/ksd-demo.XXXXXX)
  mkdir -p "$work/state" "$work/kubectl-cache"
  bus_address="unix:path=$work/system_bus_socket"
  kubeconfig="$work/kubeconfig"
  kubectl=$(ls /usr/lib/google-cloud-sdk/bin/kubectl.1.* 2>/dev/null | sort -V | tail -n 1 || true)
}

# A private bus: a dbus-daemon whose policy allows everything, on a socket in $work.
start_bus() {
  cat >"$work/bus.conf" <<EOF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>$bus_address</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
EOF
  dbus-daemon --config-file="$work/bus.conf" --nofork 2>"$work/bus.log" &
  demo_pids+=($!)
  wait_for 10 test -S "$work/system_bus_socket" || fail "the private bus did not start"
}

# The fake logind (tests/logind/fake_logind.py); $1 = InhibitDelayMaxUSec.
start_logind() {
  DBUS_SYSTEM_BUS_ADDRESS="$bus_address" /usr/bin/python3 -m dbusmock --system \
    -t tests/logind/fake_logind.py \
    -p "{\"InhibitDelayMaxUSec\": $1, \"result_file\": \"$work/logind-result\"}" \
    >"$work/logind.log" 2>&1 &
  demo_pids+=($!)
  wait_for 20 busctl --address="$bus_address" get-property org.freedesktop.login1 \
    /org/freedesktop/login1 org.freedesktop.login1.Manager InhibitDelayMaxUSec \
    || fail "the fake logind did not come up: $(cat "$work/logind.log")"
}

logind_call() {
  busctl --address="$bus_address" call org.freedesktop.login1 /org/freedesktop/login1 "$@"
}

# Our locks as logind lists them.
our_locks() {
  logind_call org.freedesktop.login1.Manager ListInhibitors | grep -o '"kube-shutdown-drain"' | wc -l
}

# Succeeds when logind lists exactly $1 locks of ours (a command for wait_for).
locks_are() {
  [ "$(our_locks)" = "$1" ]
}

start_api() {
  target/debug/fake-apiserver --seed demo/seed.json --kubeconfig "$kubeconfig" \
    --token demo-admin >"$work/api.url" 2>"$work/api.log" &
  demo_pids+=($!)
  wait_for 20 grep -q '^http' "$work/api.url" || fail "the fake API server did not start: $(cat "$work/api.log")"
  api_url=$(head -n 1 "$work/api.url")
}

# The config the daemon runs with; $1 = drain timeout, $2 = release margin.
write_config() {
  cat >"$work/config.toml" <<EOF
node_name = "demo-node-1"
kubeconfig = "$kubeconfig"
state_dir = "$work/state"

[drain]
timeout = "$1"
retry_interval = "1s"

[daemon]
release_margin = "$2"
restore_ready_timeout = "30s"
EOF
}

new_boot_id() {
  cat /proc/sys/kernel/random/uuid >"$work/boot_id"
}

# Starts `kube-shutdown-drain run` with its log in $work/daemon-N.log; $1 = binary.
start_daemon() {
  daemon_run=$((daemon_run + 1))
  KUBE_SHUTDOWN_DRAIN_CONFIG="$work/config.toml" \
    DBUS_SYSTEM_BUS_ADDRESS="$bus_address" \
    KUBE_SHUTDOWN_DRAIN_BOOT_ID_FILE="$work/boot_id" \
    NO_COLOR=1 \
    "$1" run 2>"$work/daemon-$daemon_run.log" &
  daemon_pid=$!
  demo_pids+=("$daemon_pid")
}

daemon_log() { cat "$work/daemon-$daemon_run.log"; }

# Follows the current daemon log on stdout, indented. The tail ends with the daemon, or when
# demo_cleanup kills it.
follow_daemon_log() {
  local log="$work/daemon-$daemon_run.log"
  (sh -c 'echo $$ >"$1"; exec tail -n +1 -F --pid="$2" "$3" 2>/dev/null' sh \
      "$work/tail-$daemon_run.pid" "$daemon_pid" "$log" \
    | sed -u -e 's/^[0-9T:.-]*Z *//' -e 's/^/   daemon| /') &
  demo_pids+=($!)
  wait_for 5 test -s "$work/tail-$daemon_run.pid"
  demo_pids+=("$(cat "$work/tail-$daemon_run.pid")")
}

k() {
  "$kubectl" --kubeconfig "$kubeconfig" --cache-dir "$work/kubectl-cache" "$@"
}
