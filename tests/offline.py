"""The suite reaches nothing beyond this machine: no download, no address but loopback's.

Two guards, installed by ``tests/conftest.py`` for the whole run:

* every process the suite starts has pip's index off (``PIP_NO_INDEX``): a test that would
  install from the network fails instead (the tests that install take their wheels from the
  wheelhouse ``.ci/run`` fills: ``tests/wheelhouse.py``);
* in the test processes, an audit hook refuses a connection, a datagram or a name look-up for
  any host but loopback's (``127.0.0.0/8``, ``::1``, ``localhost``) and the wildcard a
  server binds: the socket call fails as on a machine with no network (``ENETUNREACH``), and
  the test that made it fails, naming the host (:func:`reached`). Unix sockets and the kernel's
  own families (netlink) are not networks.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import sys
from typing import Any

#: Hosts that are this machine whatever their spelling (the wildcard binds, or reaches, this
#: machine's own addresses).
_LOCAL_NAMES = frozenset({"", "localhost", "localhost.", "ip6-localhost", "ip6-loopback",
                          "0.0.0.0", "::", "<broadcast>"})
_INET = (socket.AF_INET, socket.AF_INET6)

_reached: list[str] = []


def is_local(host: Any) -> bool:
    """Whether ``host`` (a name or an address, text or bytes; ``None``: the wildcard) is this
    machine's loopback or wildcard."""
    if host is None:
        return True
    if isinstance(host, (bytes, bytearray)):
        host = bytes(host).decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    name = host.strip().lower()
    if name in _LOCAL_NAMES or name.endswith(".localhost") or name.endswith(".localhost."):
        return True
    try:
        address = ipaddress.ip_address(name.split("%", 1)[0].strip("[]"))
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback or address.is_unspecified


def _refuse(event: str, host: Any) -> None:
    _reached.append(f"{event} {host!r}")
    raise OSError(errno.ENETUNREACH, f"the test suite reaches only loopback addresses, not {host!r}")


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not event.startswith("socket."):
        return
    if event in ("socket.connect", "socket.sendto"):
        sock, address = args[0], args[1]
        if getattr(sock, "family", None) in _INET and isinstance(address, tuple) and address \
                and not is_local(address[0]):
            _refuse(event, address[0])
    elif event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyname_ex",
                   "socket.gethostbyaddr"):
        if args and not is_local(args[0]):
            _refuse(event, args[0])


def install() -> None:
    """Both guards, for this process and the processes it starts (once per process)."""
    os.environ["PIP_NO_INDEX"] = "1"
    if not getattr(sys, "_allsmi_offline", False):
        sys.addaudithook(_audit)
        sys._allsmi_offline = True  # type: ignore[attr-defined]


def reached() -> list[str]:
    """What the test processes tried to reach beyond loopback since the last call (and clear)."""
    out = list(_reached)
    _reached.clear()
    return out
