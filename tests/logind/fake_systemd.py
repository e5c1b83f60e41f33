'''Fake systemd manager (org.freedesktop.systemd1) for kube-shutdown-drain's tests: only what
the daemon asks it when SIGTERM arrives.

A python-dbusmock template (load it with `/usr/bin/python3 -m dbusmock --system -t THIS_FILE
-p JSON`). It serves on the bus it is started on:

* org.freedesktop.systemd1.Manager on /org/freedesktop/systemd1: the property Version
  (parameter "Version", default "257.13-1"), the property SystemState
  (parameter "SystemState", default "running"; systemd's manager_state() says "stopping" while
  shutdown.target is active or queued), and GetUnitByPID(u) -> o, which names the daemon's unit
  for any PID (PID 0 is the caller, as in systemd).
  LoadUnit(s) -> o names the same unit for "kube-shutdown-drain.service" (and refuses any other
  with org.freedesktop.systemd1.NoSuchUnit).
* org.freedesktop.systemd1.Service on that unit's path: the property TimeoutStopUSec
  (parameter "TimeoutStopUSec", default 30000000; 2^64-1 is infinity), and PrivateUsers=
  as the shipped unit has it: PrivateUsersEx "self" (systemd 257 and newer) and PrivateUsers
  true.
* On the mock interface: SetSystemState(s) changes SystemState, as a shutdown's jobs would;
  SetPrivateUsers(s) sets PrivateUsersEx to the word and PrivateUsers to whether it is not
  "no"; the empty word removes PrivateUsersEx and sets PrivateUsers true (a systemd older than
  257 with PrivateUsers=yes).
'''

import dbus
import dbus.service
import dbusmock

from dbusmock import MOCK_IFACE

BUS_NAME = 'org.freedesktop.systemd1'
MAIN_OBJ = '/org/freedesktop/systemd1'
MAIN_IFACE = 'org.freedesktop.systemd1.Manager'
SYSTEM_BUS = True

UNIT_PATH = '/org/freedesktop/systemd1/unit/kube_2dshutdown_2ddrain_2eservice'
SERVICE_IFACE = 'org.freedesktop.systemd1.Service'


def load(mock, parameters):
    mock.AddProperties(MAIN_IFACE, dbus.Dictionary({
        'SystemState': dbus.String(parameters.get('SystemState', 'running')),
        'Version': dbus.String(parameters.get('Version', '257.13-1')),
    }, signature='sv'))
    mock.AddMethod(MAIN_IFACE, 'GetUnitByPID', 'u', 'o', f'ret = dbus.ObjectPath("{UNIT_PATH}")')
    mock.AddMethod(MAIN_IFACE, 'LoadUnit', 's', 'o',
                   'if args[0] != "kube-shutdown-drain.service":\n'
                   '    raise dbus.exceptions.DBusException("Unit " + args[0] + " not found.", '
                   'name="org.freedesktop.systemd1.NoSuchUnit")\n'
                   f'ret = dbus.ObjectPath("{UNIT_PATH}")')
    mock.AddObject(UNIT_PATH, SERVICE_IFACE, {
        'TimeoutStopUSec': dbus.UInt64(int(parameters.get('TimeoutStopUSec', 30_000_000))),
        'PrivateUsersEx': dbus.String('self'),
        'PrivateUsers': dbus.Boolean(True),
    }, [])


@dbus.service.method(MOCK_IFACE, in_signature='s', out_signature='')
def SetSystemState(self, state):
    self.Set(MAIN_IFACE, 'SystemState', dbus.String(state))


@dbus.service.method(MOCK_IFACE, in_signature='s', out_signature='')
def SetPrivateUsers(self, word):
    unit = dbusmock.get_object(UNIT_PATH)
    props = unit.props[SERVICE_IFACE]
    if word:
        props['PrivateUsersEx'] = dbus.String(word)
    else:
        props.pop('PrivateUsersEx', None)
    props['PrivateUsers'] = dbus.Boolean(word != 'no')
