"""Loaded by every Python runner in the sandbox (its directory leads PYTHONPATH).

An audit hook cannot be removed once added: the first attempt to reach the network over IP ends the
process with a line saying so. The network namespace is the real barrier; this makes the reason plain
for Python runners, and is the only barrier where the kernel refuses namespaces.
"""

import os
import socket
import sys

_EVENTS = {"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo"}
_IP_FAMILIES = {socket.AF_INET, socket.AF_INET6}


def _deny(event, args):
    if event not in _EVENTS:
        return
    if event != "socket.getaddrinfo" and getattr(args[0], "family", None) not in _IP_FAMILIES:
        return
    target = args[0] if event == "socket.getaddrinfo" else args[1]
    detail = f"{event} {target!r}"
    os.write(2, f"\nCALCULET-SANDBOX: network access denied: {detail}\n".encode(errors="replace"))
    os._exit(97)


sys.addaudithook(_deny)
