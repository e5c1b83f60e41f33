'''Fake systemd-logind for kube-shutdown-drain's tests: delay inhibitors with real semantics.

A python-dbusmock template (load it with `/usr/bin/python3 -m dbusmock --system -t THIS_FILE
-p JSON`). It serves org.freedesktop.login1.Manager on the bus it is started on, with:

* Inhibit(what, who, why, mode) -> h: a pipe's write end; the lock is held until every copy of
  that fd is closed (logind watches the read end for hang-up, as here). While a shutdown is
  being prepared or executed (PreparingForShutdown true, from the announcement until the
  machine is down or the shutdown cancelled) a lock whose `what` includes "shutdown" is refused
  as systemd refuses it (method_inhibit in logind-dbus.c checks `m->action_what & w` for every
  mode): error org.freedesktop.login1.OperationInProgress, "The operation inhibition has been
  requested for is already running". Each refusal is kept ("WHO WHAT MODE", see Refused()).
* ListInhibitors() -> a(ssssuu), with the caller's uid and pid as the bus daemon reports them.
* The lock table survives a restart of the test bus, as real logind's survives a D-Bus restart:
  with the parameter "keeper" (the socket of tests/logind/lock_keeper.py), every granted lock's
  read end is handed to the keeper, and a fake started again takes the kept locks back.
* Reboot(b) / PowerOff(b): like logind's delayed shutdown (systemd logind-dbus.c,
  delay_shutdown_or_sleep): sets PreparingForShutdown, emits PrepareForShutdownWithMetadata
  (unless the parameter "metadata" is false) and PrepareForShutdown(true) from this connection,
  then waits until no delay lock on "shutdown" is left or InhibitDelayMaxUSec has passed.
  The outcome is appended as one line to the file named by the parameter "result_file":
  "released ELAPSED kind=KIND locks=N", "timeout ELAPSED kind=KIND locks=N" or
  "no-locks 0.000 kind=KIND locks=0" (ELAPSED in seconds since the signal). The kinds are
  systemd's own names (handle_action_to_string in logind-action.c): PowerOff is "poweroff".
* Block locks: Reboot(b) / PowerOff(b) are refused with org.freedesktop.DBus.Error.AccessDenied
  ("Access denied", what `systemctl reboot` prints) while a `block` lock on "shutdown" is
  held, for root too (systemd >= 257, pull request 30307; without polkit nobody may ignore
  it); with the parameter "block_binds_root" false (systemd < 257) and for `block-weak` locks,
  a caller of UID 0 passes. StartShutdown below is logind's own start and passes every lock.
* On the mock interface: CancelShutdown() emits PrepareForShutdown(false) and appends
  "cancelled ELAPSED ..."; StartShutdown(s) starts a delayed shutdown of the kind given (the
  `type` in the metadata signal: "reboot", "poweroff", "halt", "kexec", "soft-reboot", as
  systemd's handle_action_to_string names them), as Reboot/PowerOff do; SimulateBoot() clears the shutdown state as a fresh boot would;
  Outcomes() returns the lines written so far; Refused() and Granted() the refused and the
  granted Inhibit calls; SetInhibitDelayMax(t) changes InhibitDelayMaxUSec while the fake runs,
  as logind's re-read of logind.conf on SIGHUP does;
  HangBlockInhibit(b) leaves every Inhibit in mode "block" unanswered while true (a hung
  logind, as the caller sees it); RebootOnNextInhibit() stages the race of a reboot that starts between a client's read of
  PreparingForShutdown (false) and its Inhibit: the next Inhibit on "shutdown" first starts a
  reboot (signals and all, as Reboot(false) would), then is refused as above.

Parameters: InhibitDelayMaxUSec (int, default 5000000), PreparingForShutdown (bool, default
false), kind (the type of that shutdown, default "reboot"), result_file (path, default none),
metadata (bool, default true: also the signal and the property PreparingForShutdownWithMetadata
of systemd >= 257; false: a systemd without either), keeper (path, default none),
block_binds_root (bool, default true).
'''

import json
import os
import socket
import time

import dbus
import dbus.service
from gi.repository import GLib

from dbusmock import MOCK_IFACE

BUS_NAME = 'org.freedesktop.login1'
MAIN_OBJ = '/org/freedesktop/login1'
MAIN_IFACE = 'org.freedesktop.login1.Manager'
SYSTEM_BUS = True

# logind's default InhibitDelayMaxSec (logind-core.c manager_reset_config).
DEFAULT_DELAY_MAX_USEC = 5_000_000


class Shutdown:
    '''State of the fake's one shutdown timer and its lock table.'''

    def __init__(self, delay_max_usec, result_file, metadata, keeper):
        self.delay_max_usec = delay_max_usec
        self.result_file = result_file
        self.metadata = metadata
        self.keeper = keeper
        self.locks = {}  # read-end fd -> (what, who, why, mode, uid, pid)
        self.started = None  # monotonic time of the last PrepareForShutdown(true)
        self.waiting = False  # logind waits for delay locks (between the signal and the outcome)
        self.preparing = False  # a shutdown was announced and not cancelled
        self.kind = None
        self.locks_at_start = 0
        self.timer = None
        self.outcomes = []
        self.refused = []  # "WHO WHAT MODE" of each Inhibit refused during a shutdown
        self.granted = []  # "WHO WHAT MODE" of each Inhibit granted
        self.reboot_on_next_inhibit = False
        self.block_binds_root = True
        self.hang_block = False  # HangBlockInhibit(true): block Inhibits go unanswered
        self.unanswered = []

    def delay_locks(self):
        return [lock for lock in self.locks.values() if lock[3] == 'delay' and 'shutdown' in lock[0].split(':')]

    def record(self, outcome):
        elapsed = time.monotonic() - self.started if self.started is not None else 0.0
        line = f'{outcome} {elapsed:.3f} kind={self.kind} locks={self.locks_at_start}'
        self.outcomes.append(line)
        if self.result_file:
            with open(self.result_file, 'a', encoding='utf-8') as f:
                f.write(line + '\n')

    def finish(self, outcome):
        '''Ends the wait: what real logind does next is queue the shutdown job.'''
        if self.timer is not None:
            GLib.source_remove(self.timer)
            self.timer = None
        self.record(outcome)
        self.waiting = False


def state(mock):
    return mock.fake_logind_shutdown


def load(mock, parameters):
    mock.fake_logind_shutdown = Shutdown(
        int(parameters.get('InhibitDelayMaxUSec', DEFAULT_DELAY_MAX_USEC)),
        parameters.get('result_file'),
        bool(parameters.get('metadata', True)),
        parameters.get('keeper'),
    )
    # Started "mid-shutdown": announced before this fake came up, no timer of its own.
    preparing = bool(parameters.get('PreparingForShutdown', False))
    shutdown = mock.fake_logind_shutdown
    shutdown.block_binds_root = bool(parameters.get('block_binds_root', True))
    shutdown.preparing = preparing
    shutdown.kind = str(parameters.get('kind', 'reboot')) if preparing else None
    props = {
        'InhibitDelayMaxUSec': dbus.UInt64(int(parameters.get('InhibitDelayMaxUSec', DEFAULT_DELAY_MAX_USEC))),
        'PreparingForShutdown': dbus.Boolean(preparing),
        'PreparingForSleep': dbus.Boolean(False),
    }
    if shutdown.metadata:
        props['PreparingForShutdownWithMetadata'] = with_metadata(preparing, shutdown.kind)
    mock.AddProperties(MAIN_IFACE, dbus.Dictionary(props, signature='sv'))
    for read_end, lock in take_back_kept_locks(shutdown):
        watch_lock(shutdown, read_end, lock)


def ask_keeper(shutdown, request, fds=()):
    '''One request to the lock keeper: the answer and the fds it sent (none without a keeper).'''
    if not shutdown.keeper:
        return None, []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(shutdown.keeper)
        socket.send_fds(conn, [json.dumps(request).encode('utf-8')], list(fds))
        conn.shutdown(socket.SHUT_WR)
        if request['op'] != 'get':
            return None, []
        message, got, _, _ = socket.recv_fds(conn, 1 << 20, 1024)
        return json.loads(message.decode('utf-8')), got


def take_back_kept_locks(shutdown):
    '''The locks an earlier fake on this rig granted and their holders still hold.'''
    kept, fds = ask_keeper(shutdown, {'op': 'get'})
    return list(zip(fds, kept or []))


def watch_lock(shutdown, read_end, lock):
    '''Holds the lock in the table until its holder closes every copy of the write end.'''
    what, who, why, mode, uid, pid = lock
    shutdown.locks[read_end] = (str(what), str(who), str(why), str(mode), dbus.UInt32(uid), dbus.UInt32(pid))

    def hung_up(fd, _condition):
        shutdown.locks.pop(fd, None)
        os.close(fd)
        if shutdown.waiting and not shutdown.delay_locks():
            shutdown.finish('released')
        return False

    GLib.io_add_watch(read_end, GLib.PRIORITY_HIGH, GLib.IO_HUP | GLib.IO_ERR, hung_up)


def with_metadata(preparing, kind):
    '''The a{sv} value of PreparingForShutdownWithMetadata, as systemd 257 answers it
    (property_get_preparing_shutdown_with_metadata in logind-dbus.c): `preparing`, and while
    preparing the kind under `type`.'''
    metadata = {'preparing': dbus.Boolean(preparing)}
    if preparing and kind:
        metadata['type'] = dbus.String(kind)
    return dbus.Dictionary(metadata, signature='sv')


def set_preparing(mock, preparing):
    '''Updates PreparingForShutdown (and the metadata property) with PropertiesChanged.'''
    shutdown = state(mock)
    mock.UpdateProperties(MAIN_IFACE, {'PreparingForShutdown': dbus.Boolean(preparing)})
    if shutdown.metadata:
        # Set, as for every property whose value is a container.
        mock.Set(MAIN_IFACE, 'PreparingForShutdownWithMetadata', with_metadata(preparing, shutdown.kind))


def caller_ids(mock, sender):
    '''The uid and pid of the connection that called, as the bus daemon knows them.'''
    bus = 'org.freedesktop.DBus'
    try:
        uid = mock.connection.call_blocking(bus, '/org/freedesktop/DBus', bus,
                                            'GetConnectionUnixUser', 's', (sender,))
        pid = mock.connection.call_blocking(bus, '/org/freedesktop/DBus', bus,
                                            'GetConnectionUnixProcessID', 's', (sender,))
        return dbus.UInt32(uid), dbus.UInt32(pid)
    except dbus.exceptions.DBusException:
        return dbus.UInt32(0), dbus.UInt32(0)


@dbus.service.method(MAIN_IFACE, in_signature='ssss', out_signature='h', sender_keyword='sender',
                     async_callbacks=('answer', 'fail'))
def Inhibit(self, what, who, why, mode, sender=None, answer=None, fail=None):
    if mode == 'block' and state(self).hang_block:
        # A logind that never answers: the caller's call times out on its side.
        state(self).unanswered.append((answer, fail))
        return
    try:
        reply = inhibit_now(self, what, who, why, mode, sender)
    except dbus.exceptions.DBusException as e:
        fail(e)
        return
    answer(reply)


@dbus.service.method(MOCK_IFACE, in_signature='b', out_signature='')
def HangBlockInhibit(self, hang):
    '''While true, an Inhibit in mode "block" is never answered.'''
    state(self).hang_block = bool(hang)


@dbus.service.method(MOCK_IFACE, in_signature='', out_signature='u')
def Unanswered(self):
    '''How many Inhibit calls HangBlockInhibit left unanswered.'''
    return dbus.UInt32(len(state(self).unanswered))


def inhibit_now(self, what, who, why, mode, sender):
    if mode not in ('delay', 'block', 'block-weak'):
        raise dbus.exceptions.DBusException(f'invalid inhibit mode {mode!r}',
                                            name='org.freedesktop.DBus.Error.InvalidArgs')
    shutdown = state(self)
    wants_shutdown = 'shutdown' in str(what).split(':')
    if wants_shutdown and shutdown.reboot_on_next_inhibit:
        shutdown.reboot_on_next_inhibit = False
        start_shutdown(self, 'reboot')
    if wants_shutdown and shutdown.preparing:
        shutdown.refused.append(f'{who} {what} {mode}')
        raise dbus.exceptions.DBusException(
            'The operation inhibition has been requested for is already running',
            name='org.freedesktop.login1.OperationInProgress')
    uid, pid = caller_ids(self, sender)
    read_end, write_end = os.pipe()
    lock = [str(what), str(who), str(why), str(mode), int(uid), int(pid)]
    watch_lock(shutdown, read_end, lock)
    ask_keeper(shutdown, {'op': 'put', 'lock': lock}, [read_end])
    shutdown.granted.append(f'{who} {what} {mode}')
    # UnixFd keeps its own duplicate until the reply is sent; ours is closed now, so only the
    # client's copy keeps the pipe open.
    reply = dbus.types.UnixFd(write_end)
    os.close(write_end)
    return reply


@dbus.service.method(MAIN_IFACE, in_signature='', out_signature='a(ssssuu)')
def ListInhibitors(self):
    return dbus.Array(list(state(self).locks.values()), signature='(ssssuu)')


def start_shutdown(mock, kind):
    shutdown = state(mock)
    if shutdown.preparing:
        raise dbus.exceptions.DBusException('a shutdown is already being prepared',
                                            name='org.freedesktop.login1.OperationInProgress')
    shutdown.started = time.monotonic()
    shutdown.waiting = True
    shutdown.preparing = True
    shutdown.kind = kind
    shutdown.locks_at_start = len(shutdown.delay_locks())
    set_preparing(mock, True)
    if shutdown.metadata:
        mock.EmitSignal(MAIN_IFACE, 'PrepareForShutdownWithMetadata', 'ba{sv}',
                        [True, dbus.Dictionary({'type': dbus.String(kind)}, signature='sv')])
    mock.EmitSignal(MAIN_IFACE, 'PrepareForShutdown', 'b', [True])
    if not shutdown.delay_locks():
        shutdown.finish('no-locks')
        return

    def timed_out():
        shutdown.timer = None
        shutdown.finish('timeout')
        return False

    shutdown.timer = GLib.timeout_add(max(1, shutdown.delay_max_usec // 1000), timed_out)


def refuse_if_blocked(mock, sender):
    '''Refuses a caller's shutdown while a block lock binds it (verify_shutdown_creds).'''
    shutdown = state(mock)
    uid, _pid = caller_ids(mock, sender)
    root_passes = int(uid) == 0

    def binds(lock):
        what, _who, _why, mode, _uid, _pid = lock
        if 'shutdown' not in what.split(':') or mode not in ('block', 'block-weak'):
            return False
        if root_passes and (mode == 'block-weak' or not shutdown.block_binds_root):
            return False
        return True

    if any(binds(lock) for lock in shutdown.locks.values()):
        raise dbus.exceptions.DBusException('Access denied',
                                            name='org.freedesktop.DBus.Error.AccessDenied')


@dbus.service.method(MAIN_IFACE, in_signature='b', out_signature='', sender_keyword='sender')
def Reboot(self, _interactive, sender=None):
    refuse_if_blocked(self, sender)
    start_shutdown(self, 'reboot')


@dbus.service.method(MAIN_IFACE, in_signature='b', out_signature='', sender_keyword='sender')
def PowerOff(self, _interactive, sender=None):
    refuse_if_blocked(self, sender)
    start_shutdown(self, 'poweroff')


@dbus.service.method(MOCK_IFACE, in_signature='t', out_signature='')
def SetInhibitDelayMax(self, usec):
    '''Changes InhibitDelayMaxUSec, as logind does when it re-reads logind.conf on SIGHUP.'''
    shutdown = state(self)
    shutdown.delay_max_usec = int(usec)
    self.UpdateProperties(MAIN_IFACE, {'InhibitDelayMaxUSec': dbus.UInt64(int(usec))})


@dbus.service.method(MOCK_IFACE, in_signature='s', out_signature='')
def StartShutdown(self, kind):
    start_shutdown(self, str(kind))


@dbus.service.method(MOCK_IFACE, in_signature='', out_signature='')
def CancelShutdown(self):
    '''Cancels the shutdown being prepared: while logind waits for delay locks (as `shutdown -c`
    does for a scheduled one) or after (as logind does when the shutdown job cannot be queued).'''
    shutdown = state(self)
    if not shutdown.preparing:
        raise dbus.exceptions.DBusException('no shutdown is being prepared',
                                            name='org.freedesktop.login1.NoShutdown')
    if shutdown.timer is not None:
        GLib.source_remove(shutdown.timer)
        shutdown.timer = None
    shutdown.waiting = False
    shutdown.preparing = False
    shutdown.record('cancelled')
    set_preparing(self, False)
    if shutdown.metadata:
        self.EmitSignal(MAIN_IFACE, 'PrepareForShutdownWithMetadata', 'ba{sv}',
                        [False, dbus.Dictionary({}, signature='sv')])
    self.EmitSignal(MAIN_IFACE, 'PrepareForShutdown', 'b', [False])


@dbus.service.method(MOCK_IFACE, in_signature='', out_signature='')
def SimulateBoot(self):
    '''Forgets the shutdown, as logind does after the machine came back.'''
    shutdown = state(self)
    if shutdown.timer is not None:
        GLib.source_remove(shutdown.timer)
        shutdown.timer = None
    shutdown.started = None
    shutdown.waiting = False
    shutdown.preparing = False
    shutdown.kind = None
    set_preparing(self, False)


@dbus.service.method(MOCK_IFACE, in_signature='', out_signature='as')
def Outcomes(self):
    return dbus.Array(state(self).outcomes, signature='s')


@dbus.service.method(MOCK_IFACE, in_signature='', out_signature='as')
def Refused(self):
    '''The Inhibit calls refused during a shutdown, oldest first: "WHO WHAT MODE".'''
    return dbus.Array(state(self).refused, signature='s')


@dbus.service.method(MOCK_IFACE, in_signature='', out_signature='as')
def Granted(self):
    '''Every Inhibit call granted since this fake started, oldest first: "WHO WHAT MODE".'''
    return dbus.Array(state(self).granted, signature='s')


@dbus.service.method(MOCK_IFACE, in_signature='', out_signature='')
def RebootOnNextInhibit(self):
    '''The next Inhibit on "shutdown" starts a reboot first, then is refused (the race of a
    shutdown that starts between a client's read of PreparingForShutdown and its Inhibit).'''
    shutdown = state(self)
    if shutdown.preparing:
        raise dbus.exceptions.DBusException('a shutdown is already being prepared',
                                            name='org.freedesktop.login1.OperationInProgress')
    shutdown.reboot_on_next_inhibit = True
