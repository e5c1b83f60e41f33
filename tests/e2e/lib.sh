# tests/e2e/lib.sh: the container rig for the end-to-end test (sourced, not run): cached
# Debian rootfses with systemd and dbus, booted with systemd-nspawn so that real systemd and
# systemd-logind run inside. One per suite: bookworm (systemd 252) for most boots, trixie
# (systemd 257) for what only a logind >= 255 shows (the kind of a shutdown). use_suite picks
# one; ensure_rootfs builds or reuses its cache.
#
# The container shares the host's network namespace (no --private-network), so programs in it
# reach the fake API server on 127.0.0.1. --register=no and --keep-unit: the host's PID 1 may
# not be systemd. Commands run inside through nsenter into the container's PID 1.

# The suite the next ensure_rootfs makes (use_suite sets it and E2E_ROOTFS, its cache).
E2E_SUITE=bookworm
E2E_MIRROR=${E2E_MIRROR:-http://deb.debian.org/debian}
# ca-certificates: what every node has, and what the package depends on (the kube client
# loads the system roots even for a kubeconfig with its own CA).
E2E_INCLUDE=systemd,systemd-sysv,dbus,ca-certificates
# A fixed machine ID: every boot of the copy is the same machine; only the boot ID changes
# (nspawn hands each boot a new random one).
E2E_MACHINE_ID=4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e

# rootfs_dir REPO SUITE: the cache of SUITE's rootfs. bookworm keeps the directory it had before
# there were two suites (.cache/e2e-rootfs), so a cached one is reused; any other suite gets its
# own (.cache/e2e-rootfs-trixie).
rootfs_dir() {
  case "$2" in
    bookworm) echo "$1/.cache/e2e-rootfs" ;;
    *) echo "$1/.cache/e2e-rootfs-$2" ;;
  esac
}

# use_suite REPO SUITE: the next ensure_rootfs makes SUITE; sets E2E_SUITE and E2E_ROOTFS.
use_suite() {
  E2E_SUITE=$2
  E2E_ROOTFS=$(rootfs_dir "$1" "$2")
}

log() { printf 'e2e %s: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
fail() { log "FAIL: $*"; exit 1; }
# passed MESSAGE: one scenario passed; the count goes into the last line.
PASSED=0
passed() { PASSED=$((PASSED + 1)); log "$*"; }

# A missing prerequisite skips the test, except in CI (CI=true), where it fails.
skip_or_fail() {
  if [ "${CI:-}" = "true" ]; then
    fail "$* (CI=true: a missing prerequisite is a failure)"
  fi
  log "SKIP: $*"
  exit 0
}

# ensure_rootfs DIR: debootstraps the rootfs of $E2E_SUITE into DIR unless a copy made with the
# same parameters is already there (the stamp file records them, the suite among them: a cache
# of another suite in DIR is made again, never booted as this one).
ensure_rootfs() {
  local dir=$1
  local stamp="suite=$E2E_SUITE include=$E2E_INCLUDE variant=minbase"
  local logfile t0
  logfile="$(dirname "$dir")/debootstrap-$E2E_SUITE.log"
  if [ -f "$dir/.e2e-stamp" ] && [ "$(cat "$dir/.e2e-stamp")" = "$stamp" ]; then
    log "rootfs $dir: cached ($E2E_SUITE)"
    return
  fi
  log "rootfs $dir: debootstrap $E2E_SUITE (about a minute)"
  t0=$(date +%s)
  rm -rf "$dir.tmp"
  mkdir -p "$(dirname "$dir")"
  debootstrap --variant=minbase --include="$E2E_INCLUDE" "$E2E_SUITE" "$dir.tmp" "$E2E_MIRROR" \
    > "$logfile" 2>&1 ||
    fail "debootstrap of $E2E_SUITE failed; see $logfile"
  # Booting needs no TTY login: keep the console quiet and boots fast.
  rm -f "$dir.tmp"/etc/systemd/system/getty.target.wants/*
  echo "$stamp" > "$dir.tmp/.e2e-stamp"
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
  log "rootfs $dir: debootstrap $E2E_SUITE took $(( $(date +%s) - t0 )) s"
}

# make_machine ROOTFS DIR: a private copy of the cached rootfs to install into.
make_machine() {
  local rootfs=$1 dir=$2
  rm -rf "$dir"
  cp -a --reflink=auto "$rootfs" "$dir"
  echo "$E2E_MACHINE_ID" > "$dir/etc/machine-id"
  # The host name is then the --machine= name, not the build host's (debootstrap copies it).
  rm -f "$dir/etc/hostname"
  # A container "reboot" does not change the kernel's boot ID: nspawn mounts a fresh one over
  # /proc/sys/kernel/random/boot_id each boot. The unit's ProtectProc=, ProtectKernelTunables=
  # and ProtectControlGroups= give the daemon its own /proc and /sys mounts, without that
  # overmount, so inside the sandbox it would read the host kernel's ID, the same every boot.
  # On a real node a reboot changes the kernel's ID. Here a oneshot outside the sandbox hands
  # the container's ID to the daemon through its test-only KUBE_SHUTDOWN_DRAIN_BOOT_ID_FILE.
  cat > "$dir/etc/systemd/system/e2e-boot-id.service" <<'UNIT'
[Unit]
Description=e2e: the container's boot ID for kube-shutdown-drain
DefaultDependencies=no
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/sh -c 'cat /proc/sys/kernel/random/boot_id > /run/e2e-boot-id'
UNIT
  mkdir -p "$dir/etc/systemd/system/kube-shutdown-drain.service.d"
  cat > "$dir/etc/systemd/system/kube-shutdown-drain.service.d/e2e-boot-id.conf" <<'UNIT'
[Unit]
Wants=e2e-boot-id.service
After=e2e-boot-id.service
[Service]
Environment=KUBE_SHUTDOWN_DRAIN_BOOT_ID_FILE=/run/e2e-boot-id
UNIT
}

# in_root DIR CMD...: runs CMD in DIR without booting it (package installation).
in_root() {
  local dir=$1; shift
  systemd-nspawn --quiet -D "$dir" --register=no --keep-unit --as-pid2 --pipe "$@"
}

# boot DIR NAME LOG JOURNAL: boots DIR in the background with a throw-away overlay over it
# (--volatile=overlay: every boot starts from the same disk). The host directory JOURNAL is
# bound to /var/log/journal, so the boot's journal outlives the overlay (read it with
# `journalctl -D JOURNAL`). Sets CT_PID (nspawn), CT_INIT (PID 1 inside), and CT_RC_FILE,
# where the exit code and the exit time land. STATE (optional): a host directory bound to
# /var/lib/kube-shutdown-drain, so the daemon's state outlives the overlay as on a real disk.
boot() {
  local dir=$1 name=$2 logfile=$3 journal=$4 state=${5:-}
  local binds=(--bind="$journal:/var/log/journal")
  [ -z "$state" ] || { mkdir -p -m 700 "$state"; binds+=(--bind="$state:/var/lib/kube-shutdown-drain"); }
  mkdir -p "$journal"
  CT_RC_FILE=$(mktemp)
  rm -f "$CT_RC_FILE"
  # The caller's hooks, if it defines them: on_machine_start before the container starts,
  # on_machine_exit the moment it is gone (before its exit is reported).
  if declare -F on_machine_start > /dev/null; then on_machine_start; fi
  (
    # `|| rc=$?`: under set -e a non-zero exit (133 is a reboot) would end the subshell here.
    rc=0
    systemd-nspawn -D "$dir" --machine="$name" --boot --volatile=overlay --register=no \
      --keep-unit --console=pipe "${binds[@]}" > "$logfile" 2>&1 < /dev/null || rc=$?
    at=$(date +%s.%N)
    if declare -F on_machine_exit > /dev/null; then on_machine_exit || true; fi
    echo "$rc $at" > "$CT_RC_FILE"
  ) &
  CT_SUBSHELL=$!
  CT_PID=""
  CT_INIT=""
  local i
  for i in $(seq 1 100); do
    CT_PID=$(pgrep -P "$CT_SUBSHELL" -x systemd-nspawn || true)
    # PID 1 inside is nspawn's child once it has exec'd systemd.
    [ -n "$CT_PID" ] && CT_INIT=$(pgrep -P "$CT_PID" -x systemd | head -n1 || true)
    [ -n "$CT_INIT" ] && break
    [ -f "$CT_RC_FILE" ] && fail "nspawn exited at once: $(cat "$CT_RC_FILE"); see $logfile"
    sleep 0.1
  done
  [ -n "$CT_INIT" ] || fail "container $name did not start; see $logfile"
  # Wait for boot to finish; "degraded" still means booted (a unit failed: checked later).
  # Until systemd listens on its bus, systemctl fails at once: poll.
  local state=""
  for i in $(seq 1 300); do
    state=$(ct systemctl is-system-running 2>/dev/null || true)
    case "$state" in running|degraded) break ;; esac
    sleep 0.2
  done
  case "$state" in
    running|degraded) log "container $name booted ($state), boot id $(ct cat /proc/sys/kernel/random/boot_id)" ;;
    *) fail "container $name did not finish booting within 60 s (state '$state'); see $logfile" ;;
  esac
}

# ct CMD...: runs CMD inside the running container.
ct() {
  nsenter -t "$CT_INIT" -m -u -i -p -- "$@"
}

# ct_bounded CMD...: ct, given up after 5 s (exit 124), for a command that may run while a
# soft-reboot ends the old userspace. PID 1 then stops every process of the container's PID
# namespace before it signals them (kill(-1, SIGSTOP), the signal, kill(-1, SIGCONT):
# broadcast_signal() in src/shared/killall.c), CMD among them. nsenter waits for CMD with
# WUNTRACED and stops itself when CMD stops, to pass the stop on (continue_as_child() in
# util-linux's sys-utils/nsenter.c); outside the container no SIGCONT reaches it, and ct never
# returns (seen: nsenter stopped for 13 minutes over a killed systemctl). timeout(1) sends
# SIGCONT after its SIGTERM, and SIGKILL 2 s later.
ct_bounded() {
  timeout -k 2 5 nsenter -t "$CT_INIT" -m -u -i -p -- "$@"
}

# wait_exit TIMEOUT_SECS: waits for the container to stop. Sets CT_RC and CT_EXIT_AT.
wait_exit() {
  local limit=$1 i
  for i in $(seq 1 $((limit * 10))); do
    if [ -f "$CT_RC_FILE" ]; then
      read -r CT_RC CT_EXIT_AT < "$CT_RC_FILE"
      wait "$CT_SUBSHELL" 2>/dev/null || true
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# stop_container: powers the container off without logind (SIGTERM to nspawn makes its init
# halt directly), so no inhibitor delays the test's cleanup.
stop_container() {
  if [ -n "${CT_PID:-}" ] && kill -0 "$CT_PID" 2>/dev/null; then
    kill -TERM "$CT_PID" 2>/dev/null || true
    wait_exit 30 || kill -KILL "$CT_PID" 2>/dev/null || true
  fi
  CT_PID=""
}

# wait_for DESCRIPTION TIMEOUT_SECS CMD...: polls CMD every 0.2 s until it succeeds.
wait_for() {
  local what=$1; shift
  wait_for_quietly "$@" || fail "timed out after ${1}s waiting for: $what"
}

# wait_for_quietly LIMIT_SECS CMD...: as wait_for, returning 1 at the limit (the caller says why).
wait_for_quietly() {
  local limit=$1 i; shift
  for i in $(seq 1 $((limit * 5))); do
    if "$@" > /dev/null 2>&1; then return 0; fi
    sleep 0.2
  done
  return 1
}
