"""The exporter's open connections: taking them on within the bounds of
:mod:`allsmi.exporter.bounds` (per-address and total caps, the oldest slow head reader or idle
connection evicted for a new one, deadlines), watching them on the selector and closing them.
Accepting pauses for ``accept_backoff`` seconds when descriptors run out (logged once per
``log_every``). :class:`allsmi.exporter.connections.ConnectionLoop` reads, answers and writes.
"""

from __future__ import annotations

import collections
import errno
import logging
import selectors
import socket
import ssl
import time
from typing import Any

from allsmi.exporter.bounds import (LINGERING, WORKING, Conn, Limits, client_of, excess_head_readers,
                                    room_victim)

log = logging.getLogger(__name__)

REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
           b"Content-Length: 17\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
           b"server too busy\r\n")
_NO_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
#: Reads of a lingering connection per turn of the loop (of at most ``max_head_bytes`` each).
_DRAIN_READS = 4


class ConnectionTable:
    """The open connections of one listener; :class:`allsmi.exporter.connections.ConnectionLoop`
    runs the loop over them."""

    def __init__(self, listener: socket.socket, *, ssl_context: ssl.SSLContext | None,
                 limits: Limits) -> None:
        self.listener = listener
        self.ssl_context = ssl_context
        self.limits = limits
        self.evicted = 0
        """Connections closed to make room for newer ones (slow head readers, idle or stalled)."""
        self.timed_out = 0
        """Connections closed at a deadline (request head or response not done in time)."""
        self.refused = 0
        """Connections or requests answered 503 at a hard bound."""
        self.accept_errors = 0
        """``accept`` calls that failed (EMFILE and friends)."""
        self._selector = selectors.DefaultSelector()
        self._conns: dict[int, Conn] = {}
        self._per_client: collections.Counter[str] = collections.Counter()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._accept_paused_until = 0.0
        self._accept_failures_unlogged = 0
        self._accept_logged_at = -float("inf")
        listener.setblocking(False)

    def open_connections(self) -> dict[str, int]:
        """How many connections are open, by state (for tests and diagnostics)."""
        return dict(collections.Counter(c.state for c in list(self._conns.values())))

    # -- accepting -----------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(64):
            try:
                sock, address = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._accept_failed(exc)
                return
            self._admit(sock, address)

    def _accept_failed(self, exc: OSError) -> None:
        self.accept_errors += 1
        if exc.errno not in _NO_DESCRIPTORS:  # e.g. ECONNABORTED: that client gave up
            log.debug("accept failed: %s", exc)
            return
        # Out of descriptors: the listener stays readable, so retrying at once would spin.
        now = time.monotonic()
        self._accept_paused_until = now + self.limits.accept_backoff
        try:
            self._selector.unregister(self.listener)
        except (KeyError, ValueError):  # not registered (already backing off): nothing to undo
            pass
        self._accept_failures_unlogged += 1
        if now - self._accept_logged_at >= self.limits.log_every:
            log.warning("accept failed %d time(s) since the last report: %s; pausing new "
                        "connections for %g s at a time (raise LimitNOFILE?)",
                        self._accept_failures_unlogged, exc.strerror or exc,
                        self.limits.accept_backoff)
            self._accept_logged_at = now
            self._accept_failures_unlogged = 0

    def _resume_accepting(self, now: float) -> None:
        """Listen again once the pause after running out of descriptors is over."""
        if self._accept_paused_until and now >= self._accept_paused_until:
            self._accept_paused_until = 0.0
            self._selector.register(self.listener, selectors.EVENT_READ, "listener")

    def _admit(self, sock: socket.socket, address: Any) -> Conn | None:
        """Take a new connection on within the bounds; ``None`` when it was refused or its TLS
        setup failed (then it is closed already)."""
        now = time.monotonic()
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:  # an optimisation only (and not on unix sockets): serving goes on without it
            pass
        client = client_of(address)
        if len(self._conns) >= self.limits.max_open and not self._make_room():
            self.refused += 1  # every open connection is being answered: none to evict
            refuse(sock, plain=self.ssl_context is None)
            return None
        refusing = self._per_client[client] >= self.limits.max_per_client
        tls = self.ssl_context is not None
        if tls:
            try:
                sock = self.ssl_context.wrap_socket(sock, server_side=True,  # type: ignore[union-attr]
                                                    do_handshake_on_connect=False)
            except (ssl.SSLError, OSError) as exc:
                log.debug("TLS setup for %s failed: %s", address, exc)
                sock.close()
                return None
        conn = Conn(sock, address, now, self.limits, tls, refusing)
        self._conns[sock.fileno()] = conn
        if not refusing:
            self._per_client[client] += 1
        self._watch(conn, selectors.EVENT_READ)
        return conn

    def _make_room(self) -> bool:
        """Close one connection for a new one (:func:`~allsmi.exporter.bounds.room_victim`);
        whether one was closed."""
        victim = room_victim(self._conns.values())
        if victim is None:
            return False
        self._evict(victim, "to make room for a new connection")
        return True

    def _evict(self, conn: Conn, why: str) -> None:
        self.evicted += 1
        log.debug("closing the %s connection from %s (%s since %.1f s) %s", conn.state,
                  conn.address, conn.state, time.monotonic() - conn.since, why)
        self._close(conn)

    def _expire(self, now: float) -> None:
        for conn in list(self._conns.values()):
            if conn.state == LINGERING and now > conn.deadline:
                self._close(conn)  # answered: the end of its lingering close, not a failure
            elif conn.state != WORKING and now > conn.deadline and not conn.closed:
                self.timed_out += 1
                log.debug("closing %s connection from %s: deadline passed", conn.state, conn.address)
                self._close(conn)
        for conn in excess_head_readers(self._conns.values(), self.limits, now):
            self._evict(conn, "(too many head readers from its address, or in all)")

    # -- plumbing ------------------------------------------------------------

    def _watch(self, conn: Conn, events: int) -> None:
        if conn.events == events or conn.closed:
            return
        try:
            if conn.events:
                self._selector.modify(conn.sock, events)
            else:
                self._selector.register(conn.sock, events)
            conn.events = events
        except (KeyError, ValueError, OSError):
            self._close(conn)

    def _unwatch(self, conn: Conn) -> None:
        if conn.events:
            try:
                self._selector.unregister(conn.sock)
            except (KeyError, ValueError):  # not registered, or already closed: nothing to undo
                pass
            conn.events = 0

    def _close(self, conn: Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self._unwatch(conn)
        try:
            fd = conn.sock.fileno()
        except OSError:
            fd = -1
        if self._conns.get(fd) is conn:
            del self._conns[fd]
        if not conn.refusing:
            self._uncount(conn)
        try:
            conn.sock.close()
        except OSError:  # the peer or the kernel closed it first: it is closed either way
            pass

    def _linger(self, conn: Conn) -> None:
        """Close ``conn`` once the client has its answer: shut it for writing (the answer then
        ends in a FIN), and read and drop what the client still sends until it closes, within
        ``linger_timeout`` and ``linger_bytes`` (:mod:`allsmi.exporter.bounds`). Closing at once
        with unread input (a body, a pipelined request) would reset the connection and cut the
        answer short."""
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._close(conn)
            return
        if not conn.refusing:  # answered: its address may open another connection meanwhile
            self._uncount(conn)
        now = time.monotonic()
        conn.state, conn.since, conn.head_started = LINGERING, now, None
        conn.deadline = now + self.limits.linger_timeout
        conn.buf.clear()
        conn.linger_left = self.limits.linger_bytes
        self._watch(conn, selectors.EVENT_READ)
        self._drain(conn)

    def _drain(self, conn: Conn) -> None:
        """Read and drop what a lingering connection sends; close it at its end or its bound."""
        try:
            for _ in range(_DRAIN_READS):  # then the other connections' turn
                data = conn.sock.recv(min(conn.linger_left, self.limits.max_head_bytes))
                if not data:
                    break
                conn.linger_left -= len(data)
                if conn.linger_left <= 0:
                    log.debug("%s sent more than %d bytes after its answer: closed",
                              conn.address, self.limits.linger_bytes)
                    break
            else:
                return
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
            return  # nothing more for now: the selector says when
        except (ssl.SSLError, OSError):
            pass
        self._close(conn)

    def _uncount(self, conn: Conn) -> None:
        """Stop counting ``conn`` against its address (closed, or answered and lingering)."""
        conn.refusing = True
        self._per_client[conn.client] -= 1
        if self._per_client[conn.client] <= 0:
            del self._per_client[conn.client]

    def close(self) -> None:
        """Release the table's own resources (after the loop stopped)."""
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, OSError):
            pass  # already awake (buffer full) or closed

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):  # drained (nothing more to read): the wake-up is consumed
            pass


def refuse(sock: socket.socket, *, plain: bool) -> None:
    """Close a connection that cannot be taken on (answered 503 first where it is plain HTTP)."""
    try:
        if plain:
            sock.send(REFUSED)
    except OSError:
        pass
    finally:
        sock.close()
