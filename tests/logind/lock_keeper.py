'''Keeps the fake logind's inhibitor table across restarts of the test bus.

Real logind keeps its delay locks when the D-Bus daemon restarts (logind itself runs on and
reconnects) and when logind restarts (it reopens them from /run/systemd/inhibit). The fake logind
dies with the test bus, so without help its lock table would die too, and a client that leaked a
lock across a reconnect would never be caught. This keeper holds a copy of each lock's read end:
the fake logind hands one over (SCM_RIGHTS) for every lock it grants and takes them all back when
it starts. A lock is released when every copy of its write end is closed; the read end then
reports hang-up, here as in the fake logind, and the keeper forgets it.

Usage: /usr/bin/python3 lock_keeper.py SOCKET_PATH. Requests, one per connection, JSON:
{"op": "put", "lock": [what, who, why, mode, uid, pid]} with one fd, or {"op": "get"}, answered
with a JSON list of the kept locks and their read ends, in the same order.
'''

import json
import os
import select
import socket
import sys


def main(path):
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Listening before the name appears: whoever sees the socket can connect.
    server.bind(path + '.new')
    server.listen(16)
    os.rename(path + '.new', path)
    locks = {}  # read-end fd -> [what, who, why, mode, uid, pid]
    poller = select.poll()
    poller.register(server.fileno(), select.POLLIN)
    while True:
        for fd, events in poller.poll():
            if fd == server.fileno():
                conn, _ = server.accept()
                with conn:
                    serve(conn, locks, poller)
            elif fd in locks and events & (select.POLLHUP | select.POLLERR):
                poller.unregister(fd)
                os.close(fd)
                del locks[fd]


def serve(conn, locks, poller):
    message, fds, _, _ = socket.recv_fds(conn, 65536, 4)
    request = json.loads(message.decode('utf-8'))
    if request['op'] == 'put' and fds:
        locks[fds[0]] = request['lock']
        # POLLHUP is always reported: no events need asking for.
        poller.register(fds[0], 0)
        for extra in fds[1:]:
            os.close(extra)
    elif request['op'] == 'get':
        kept = list(locks.items())
        payload = json.dumps([meta for _, meta in kept]).encode('utf-8')
        socket.send_fds(conn, [payload], [fd for fd, _ in kept])
    else:
        for fd in fds:
            os.close(fd)


if __name__ == '__main__':
    main(sys.argv[1])
