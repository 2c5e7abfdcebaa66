"""Which client a connection counts against, for the per-client bounds (connections per client,
head readers per client, queued password checks per client).

Each IPv6 address counted as a client of its own: one host holding a /64 (as SLAAC hosts do)
could open ``max_per_client`` connections from each of its 2**64 addresses in turn. A client is
now an IPv6 address's /64, and an IPv4 client of a dual-stack listener (``::ffff:a.b.c.d``) its
IPv4 address.
"""

from __future__ import annotations

import pytest

from allsmi.exporter.bounds import client_of

from .test_listen_dual_stack import in_network_namespace


def test_an_ipv6_client_is_its_64_prefix() -> None:
    one = client_of(("2001:db8:1:2::1", 40000, 0, 0))
    assert one == "2001:db8:1:2::/64"
    assert client_of(("2001:db8:1:2:ffff:abcd:1234:5678", 40001, 0, 0)) == one
    assert client_of(("2001:db8:1:3::1", 40000, 0, 0)) != one
    # a zone's link is its own: fe80::/64 is every link's
    assert client_of(("fe80::1%eth0", 1, 0, 2)) == client_of(("fe80::2%eth0", 1, 0, 2)) \
        != client_of(("fe80::1%eth1", 1, 0, 3))


def test_an_ipv4_mapped_client_is_its_ipv4_address() -> None:
    assert client_of(("::ffff:127.0.0.1", 40000, 0, 0)) == client_of(("127.0.0.1", 40000)) \
        == "127.0.0.1"
    assert client_of(("::ffff:127.0.0.2", 40000, 0, 0)) == "127.0.0.2"  # not one ::/64 for all


def test_an_ipv4_client_translated_into_nat64_space_is_its_ipv4_address() -> None:
    """Behind SIIT/NAT46, every IPv4 client arrives from one /64 (``64:ff9b::/96``): as a /64
    they were one client, so one of them could lock all the others out."""
    assert client_of(("64:ff9b::c000:207", 1, 0, 0)) == "192.0.2.7"
    assert client_of(("64:ff9b::198.51.100.1", 1, 0, 0)) == "198.51.100.1"
    assert client_of(("64:ff9b::c000:207", 1, 0, 0)) != client_of(("64:ff9b::c000:208", 1, 0, 0))
    assert client_of(("64:ff9b:1::c000:207", 1, 0, 0)) == "192.0.2.7"  # the local-use prefix
    assert client_of(("64:ff9b:0:0:1::1", 1, 0, 0)) == "64:ff9b::/64"  # outside the /96


def test_an_ipv4_client_is_its_address_and_others_as_given() -> None:
    assert client_of(("127.0.0.1", 1)) != client_of(("127.0.0.2", 1))
    assert client_of(("127.0.0.1", 1)) == client_of(("127.0.0.1", 2))
    assert client_of("") == "" and client_of("/run/allsmi.sock") == "/run/allsmi.sock"


# Run in a network namespace of its own (``unshare --user --net``), whose only interface is the
# loopback one: IPv4 loopback addresses seen through a dual-stack listener (as ``::ffff:a.b.c.d``).
# One connection of a client is held open; with ``max_per_client=1`` another of the same client
# is answered 503, one of another client 200. Prints "<source> <status>" lines. (Only loopback
# addresses in tests: the /64 rule is checked on client_of itself, above.)
_PROBE = r"""
import socket, subprocess, sys, threading
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
from allsmi.exporter.connections import ConnectionLoop, Limits, Reply
from allsmi.exporter.http import listening_socket
listener = listening_socket("", 0)  # --listen :PORT: dual-stack
assert listener.family == socket.AF_INET6, listener
port = listener.getsockname()[1]
ok = lambda head, client, fast: Reply([b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"], True, 200)
loop = ConnectionLoop(listener, ok, limits=Limits(max_per_client=1))
threading.Thread(target=loop.serve_forever, daemon=True).start()
def connect(source):
    family = socket.AF_INET6 if ":" in source else socket.AF_INET
    return socket.create_connection(("::1" if family == socket.AF_INET6 else "127.0.0.1", port),
                                    timeout=5, source_address=(source, 0))
for held, others in (("127.0.0.1", ("127.0.0.1", "127.0.0.2")),):
    with connect(held):
        for source in others:
            with connect(source) as sock:
                sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                print(source, sock.recv(1024).split(b" ")[1].decode(), flush=True)
loop.stop()
"""


def test_an_ipv4_client_of_a_dual_stack_listener_is_bound_by_its_address() -> None:
    result = in_network_namespace(_PROBE)
    if result.returncode != 0 and "RTNETLINK" in result.stderr:
        pytest.skip(f"no loopback interface in a private namespace here: {result.stderr.strip()}")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "127.0.0.1 503",  # ::ffff:127.0.0.1, the held 127.0.0.1's IPv4 address
        "127.0.0.2 200",  # another IPv4 address: not one ::/64 for every IPv4 client
    ], result.stdout + result.stderr
