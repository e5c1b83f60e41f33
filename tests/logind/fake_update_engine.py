'''Fake Flatcar update_engine (com.coreos.update1) for kube-shutdown-drain's tests.

A python-dbusmock template (load it with `/usr/bin/python3 -m dbusmock --system -t THIS_FILE
-p JSON`). It serves com.coreos.update1.Manager on /com/coreos/update1, the names and types of
update_engine's own D-Bus service (coreos update_engine src/update_engine/main.cc and
dbus_service.cc):

* GetStatus() -> (x last_checked_time, d progress, s current_operation, s new_version,
  x new_size), from the parameters "CurrentOperation" (default "UPDATE_STATUS_IDLE") and
  "NewVersion" (default "").
* On the mock interface: SetStatus(s operation, s new_version) changes the status and emits
  StatusUpdate(xdssx) with it, as update_engine does at every change.
'''

import dbus
import dbus.service

from dbusmock import MOCK_IFACE

BUS_NAME = 'com.coreos.update1'
MAIN_OBJ = '/com/coreos/update1'
MAIN_IFACE = 'com.coreos.update1.Manager'
SYSTEM_BUS = True


def load(mock, parameters):
    mock.status = [
        dbus.Int64(1764800000),
        dbus.Double(0.0),
        dbus.String(parameters.get('CurrentOperation', 'UPDATE_STATUS_IDLE')),
        dbus.String(parameters.get('NewVersion', '')),
        dbus.Int64(0),
    ]
    mock.AddMethod(MAIN_IFACE, 'GetStatus', '', 'xdssx', 'ret = tuple(self.status)')


@dbus.service.method(MOCK_IFACE, in_signature='ss', out_signature='')
def SetStatus(self, operation, new_version):
    self.status[2] = dbus.String(operation)
    self.status[3] = dbus.String(new_version)
    self.EmitSignal(MAIN_IFACE, 'StatusUpdate', 'xdssx', self.status)
