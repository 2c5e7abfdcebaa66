"""The bounds of the exporter's connection loop, and which connection gives way at each.

* **a whole-request deadline**: a new connection must complete its TLS
  handshake, request line and headers within ``header_timeout`` seconds of
  being accepted; on a kept-alive connection the next request may wait
  ``idle_timeout`` seconds for its first byte, then must be complete within
  ``header_timeout``. Dribbling one byte at a time does not extend anything;
* **bounded head readers, the oldest closed**: connections in the middle of a
  request head count against ``max_reading`` (in total) and
  ``max_reading_per_client`` (per client address). Above a bound, the head
  readers that have waited longest (and at least ``head_grace`` seconds) are
  closed. A scraper that sends its request promptly after connecting is
  therefore read even while a hundred slow connections from its own address
  are open: it is the newest, never the oldest;
* **kept-alive connections are not head readers**: a connection that has
  completed a request and waits for the next one (``idle``) is closed only
  after ``idle_timeout``, or to make room at ``max_open``. Many scrapers
  behind one address (a proxy, NAT) keep their connections;
* **per client address**, at most ``max_per_client`` connections: beyond it a
  new connection's request is answered ``503`` at once and closed;
* **a whole-response deadline**: a response must be taken by the client
  within ``write_timeout`` seconds;
* **a bounded lingering close**: a connection closed after its answer (``Connection: close``,
  a request with a body, a malformed one) is first shut for writing and what the client still
  sends (an unread body, pipelined requests) is read and dropped until it closes its side, for
  at most ``linger_timeout`` seconds and ``linger_bytes`` bytes. Closing a socket with unread
  input makes the kernel reset the connection and drop whatever of the answer the client has not
  read yet (RFC 9112 section 9.6; Go's net/http and Apache linger too). A lingering connection
  counts against no per-address bound and is the first to give way at ``max_open``;
* **a hard bound on all open connections** (``max_open``, derived from the
  process's file descriptor limit by :func:`max_open_for_fd_limit`): a new
  connection beyond it takes the place of a connection of the address
  holding the most (its oldest head reader, else its longest idle, else its
  longest-stalled writer), so clients that do not read their responses
  cannot lock others out; only when every connection is being answered does
  a new one get an immediate ``503``;
* **password checks** wait in a queue of at most ``max_queued`` requests,
  ``max_queued_per_client`` per address, served round-robin by address
  (:mod:`allsmi.exporter.authqueue`).

A "client address" in every bound above is :func:`client_of`'s: an IPv4 address, or an IPv6
client's /64 prefix (one host may hold a whole /64 and rotate through it).
"""

from __future__ import annotations

import collections
import ipaddress
import resource
import socket
from dataclasses import dataclass
from typing import Any, Deque, Iterable

#: Descriptors kept free for everything else the process opens (ledger, backends, TLS files).
FD_HEADROOM = 64


def max_open_for_fd_limit(soft: int | None = None) -> int:
    """Connections the loop may hold open under the soft ``RLIMIT_NOFILE`` (or ``soft``):
    the limit less ``FD_HEADROOM`` or an eighth of it, whichever is larger, at least 16 and
    at most 65536."""
    if soft is None:
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if soft == resource.RLIM_INFINITY:
            soft = 1 << 20
    return max(16, min(soft - max(FD_HEADROOM, soft // 8), 1 << 16))


@dataclass(frozen=True)
class Limits:
    """The bounds of the connection loop (see the module docstring)."""

    header_timeout: float = 5.0
    idle_timeout: float = 10.0
    write_timeout: float = 10.0
    linger_timeout: float = 2.0
    linger_bytes: int = 4 << 20
    head_grace: float = 1.0
    max_reading: int = 64
    max_reading_per_client: int = 16
    max_per_client: int = 128
    max_open: int = 1024
    max_head_bytes: int = 64 * 1024
    workers: int = 4
    max_queued: int = 64
    max_queued_per_client: int = 16
    accept_backoff: float = 0.5
    log_every: float = 10.0
    max_loop_errors: int = 100

    @classmethod
    def for_this_process(cls, **overrides: Any) -> "Limits":
        """The defaults with ``max_open`` derived from this process's descriptor limit."""
        return cls(**{"max_open": max_open_for_fd_limit(), **overrides})


HANDSHAKE, READING, IDLE, WORKING, WRITING = "handshake", "reading", "idle", "working", "writing"
#: Answered and shut for writing; what the client still sends is read and dropped until it closes.
LINGERING = "lingering"
HEAD_READERS = (HANDSHAKE, READING)


#: IPv6 prefixes whose addresses embed an IPv4 address in their last 32 bits (RFC 6052's
#: well-known prefix; RFC 8215's local-use one, as /96 deployments use it).
NAT64_PREFIXES = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))


def client_of(address: Any) -> str:
    """The client a connection counts against, for every per-client bound (the one place it is
    derived): an IPv4 address; an IPv6 address's /64 prefix (``2001:db8:1:2::/64``), which one
    host holds whole (SLAAC, privacy addresses) and could rotate through; an IPv4-mapped IPv6
    address (``::ffff:192.0.2.7``, as a dual-stack socket reports an IPv4 client) as that IPv4
    address. A link-local prefix keeps its zone (``fe80::/64%eth0``): each link is its own.
    An IPv4 client translated into IPv6 (SIIT or NAT46 in front of an IPv6-only exporter) under
    the NAT64 prefixes ``64:ff9b::/96`` or ``64:ff9b:1::/48`` (RFC 6052, RFC 8215; the usual
    /96 embedding) is its IPv4 address: every such client shares the prefix's /64. Anything
    else (a Unix socket's path) as itself."""
    host = address[0] if isinstance(address, tuple) and address else address
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return str(host)
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        if any(ip in net for net in NAT64_PREFIXES):
            return str(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF))
        prefix = str(ipaddress.IPv6Network((int(ip) >> 64 << 64, 64)))
        return f"{prefix}%{ip.scope_id}" if ip.scope_id else prefix  # fe80::/64 is per link
    return str(ip)


class Conn:
    """One connection's state in the loop."""

    __slots__ = ("sock", "address", "client", "state", "buf", "out", "close_after", "since",
                 "deadline", "head_started", "events", "refusing", "closed", "linger_left")

    def __init__(self, sock: socket.socket, address: Any, now: float, limits: Limits,
                 tls: bool, refusing: bool) -> None:
        self.sock = sock
        self.address = address
        self.client = client_of(address)
        self.state = HANDSHAKE if tls else READING
        self.buf = bytearray()
        self.out: Deque[memoryview] = collections.deque()
        self.close_after = False
        self.since = now  # when its current state began (head, idle wait); a writer's last progress
        self.deadline = now + limits.header_timeout
        self.head_started: float | None = now
        self.events = 0
        self.refusing = refusing  # over max_per_client (or lingering): not counted per address
        self.closed = False
        self.linger_left = 0  # bytes still read and dropped while lingering


_GIVES_WAY = {LINGERING: -1, HANDSHAKE: 0, READING: 0, IDLE: 1, WRITING: 2}


def room_victim(conns: Iterable[Conn]) -> Conn | None:
    """The connection to close for a new one at ``max_open``: a lingering one (answered
    already) or a refused one waiting for its 503 first; else, of the address holding the most, its oldest head reader, else its
    longest idle, else its longest-stalled writer. ``None`` when all are being answered."""
    candidates = [c for c in conns if c.state != WORKING and not c.closed]
    if not candidates:
        return None
    refusing = [c for c in candidates if c.refusing]
    if refusing:
        return min(refusing, key=lambda c: (_GIVES_WAY[c.state], c.since))
    heaviest = collections.Counter(c.client for c in candidates).most_common(1)[0][0]
    return min((c for c in candidates if c.client == heaviest),
               key=lambda c: (_GIVES_WAY[c.state], c.since))


def excess_head_readers(conns: Iterable[Conn], limits: Limits, now: float) -> list[Conn]:
    """The head readers to close: per address, the longest-waiting above
    ``max_reading_per_client``; then, while more than ``max_reading`` remain, the
    longest-waiting of the address holding the most. Only those waiting ``head_grace``
    or longer: a connection is given the time to send its request."""
    readers = sorted((c for c in conns if c.state in HEAD_READERS and not c.closed),
                     key=lambda c: c.since)
    if len(readers) <= min(limits.max_reading_per_client, limits.max_reading):
        return []
    old = now - limits.head_grace
    by_client: dict[str, list[Conn]] = collections.defaultdict(list)
    for conn in readers:
        by_client[conn.client].append(conn)
    victims: list[Conn] = []
    for mine in by_client.values():
        excess = len(mine) - limits.max_reading_per_client
        while excess > 0 and mine[0].since <= old:
            victims.append(mine.pop(0))
            excess -= 1
    left = len(readers) - len(victims)
    while left > limits.max_reading:
        heaviest = max(by_client, key=lambda c: len(by_client[c]))
        if not by_client[heaviest] or by_client[heaviest][0].since > old:
            break
        victims.append(by_client[heaviest].pop(0))
        left -= 1
    return victims
