"""The exporter's connection loop: slow or hostile clients cost a socket, never a scrape.

One thread owns every socket. It accepts at once, performs TLS handshakes and
reads request heads without blocking, and writes the prepared response bytes
without blocking; a request whose answer needs real work (a bcrypt password
check) goes to :class:`allsmi.exporter.authqueue.FairQueue` instead, so that
password guessing cannot stall the loop. The bounds:

* **a whole-request deadline**: a new connection must complete its TLS
  handshake, request line and headers within ``header_timeout`` seconds of
  being accepted; on a kept-alive connection the next request may wait
  ``idle_timeout`` seconds for its first byte, then must be complete within
  ``header_timeout``. Dribbling one byte at a time does not extend anything;
* **bounded head readers, the oldest evicted**: connections in the middle of
  a request head count against ``max_reading`` (in total) and
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
* **a hard bound on all open connections** (``max_open``, derived from the
  process's file descriptor limit by :func:`max_open_for_fd_limit`): a new
  connection beyond it takes the place of a connection of the address
  holding the most (its oldest head reader, else its longest idle, else its
  longest-stalled writer), so clients that do not read their responses
  cannot lock others out; only when every connection is being answered does
  a new one get an immediate ``503``;
* **pipelining is served in order, one request at a time**: a connection is
  not read while it has a request being answered, and one read takes at most
  ``max_head_bytes``, so the requests waiting on one connection are bounded
  (the rest wait in the kernel: TCP back-pressure). Connections with waiting
  requests take turns, one request each per turn, without recursion;
* **password checks** wait in a queue of at most ``max_queued`` requests,
  ``max_queued_per_client`` per address, served round-robin by address;
* **failures are loud**: ``accept`` failing for lack of descriptors (EMFILE)
  pauses accepting for ``accept_backoff`` seconds and is logged once per
  ``log_every``; an exception while handling a connection is logged, that
  connection is closed and the loop goes on; more than
  ``max_loop_errors`` such exceptions within a minute end
  :meth:`ConnectionLoop.serve_forever` with the exception (``allsmi serve``
  then exits non-zero for its supervisor to restart it).
"""

from __future__ import annotations

import collections
import errno
import logging
import resource
import selectors
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Deque, Optional

from allsmi.exporter.authqueue import FairQueue

log = logging.getLogger(__name__)

REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
           b"Content-Length: 17\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
           b"server too busy\r\n")
HEAD_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n"
                  b"Connection: close\r\n\r\n")
_SEND_CHUNK = 256 * 1024
_SCAN_EVERY = 0.1
#: Descriptors kept free for everything else the process opens (ledger, backends, TLS files).
FD_HEADROOM = 64
_NO_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def max_open_for_fd_limit(soft: int | None = None) -> int:
    """Connections the loop may hold open under the soft ``RLIMIT_NOFILE`` (or ``soft``):
    the limit less ``FD_HEADROOM`` or an eighth of it, whichever is larger, at least 16."""
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


@dataclass
class Reply:
    """What to send back: the bytes, and whether to close the connection afterwards."""

    chunks: list[bytes]
    close: bool


#: ``respond(head, client_address, fast)``: the reply, or ``None`` when ``fast`` and the
#: request needs the thread pool (then it is called again there with ``fast=False``).
Responder = Callable[[bytes, Any, bool], Optional[Reply]]

_HANDSHAKE, _READING, _IDLE, _WORKING, _WRITING = "handshake", "reading", "idle", "working", "writing"
_HEAD_READERS = (_HANDSHAKE, _READING)


class _Conn:
    __slots__ = ("sock", "address", "client", "state", "buf", "out", "close_after", "since",
                 "deadline", "head_started", "events", "refusing", "closed")

    def __init__(self, sock: socket.socket, address: Any, now: float, limits: Limits,
                 tls: bool, refusing: bool) -> None:
        self.sock = sock
        self.address = address
        self.client = _client(address)
        self.state = _HANDSHAKE if tls else _READING
        self.buf = bytearray()
        self.out: Deque[memoryview] = collections.deque()
        self.close_after = False
        self.since = now  # when its current state began (head, idle wait, reply)
        self.deadline = now + limits.header_timeout
        self.head_started: float | None = now
        self.events = 0
        self.refusing = refusing  # over max_per_client: its request is answered 503
        self.closed = False


def _client(address: Any) -> str:
    return address[0] if isinstance(address, tuple) and address else str(address)


def _head_end(buf: bytearray) -> int:
    """Index just past the blank line ending the request head, or -1."""
    crlf = buf.find(b"\r\n\r\n")
    lf = buf.find(b"\n\n")
    ends = [i + 4 for i in (crlf,) if i >= 0] + [i + 2 for i in (lf,) if i >= 0]
    return min(ends) if ends else -1


class ConnectionLoop:
    """Serves ``listener`` until :meth:`stop`; see the module docstring."""

    def __init__(self, listener: socket.socket, respond: Responder, *,
                 ssl_context: ssl.SSLContext | None = None, limits: Limits | None = None) -> None:
        self.listener = listener
        self.respond = respond
        self.ssl_context = ssl_context
        self.limits = limits or Limits.for_this_process()
        self.evicted = 0
        """Connections closed to make room for newer ones (slow head readers, idle or stalled)."""
        self.timed_out = 0
        """Connections closed at a deadline (request head or response not done in time)."""
        self.refused = 0
        """Connections or requests answered 503 at a hard bound."""
        self.accept_errors = 0
        """``accept`` calls that failed (EMFILE and friends)."""
        self.loop_errors = 0
        """Exceptions caught in the loop (each logged; its connection closed)."""
        self._selector = selectors.DefaultSelector()
        self._conns: dict[int, _Conn] = {}
        self._per_client: collections.Counter[str] = collections.Counter()
        self._ready: Deque[_Conn] = collections.deque()  # may hold a complete request to answer
        self._done: Deque[tuple[_Conn, Reply | None]] = collections.deque()
        self._auth = FairQueue(self._respond_slowly, lambda job: self._finish_job(job[0], None),
                               workers=self.limits.workers, max_queued=self.limits.max_queued,
                               max_queued_per_client=self.limits.max_queued_per_client)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self._accept_paused_until = 0.0
        self._accept_failures_unlogged = 0
        self._accept_logged_at = -float("inf")
        self._errors: Deque[float] = collections.deque()
        listener.setblocking(False)

    # -- running -------------------------------------------------------------

    def serve_forever(self) -> None:
        """Run the loop in the calling thread until :meth:`stop` is called.

        Raises the last exception when more than ``max_loop_errors`` were caught in a minute."""
        self._stopped.clear()
        sel = self._selector
        sel.register(self.listener, selectors.EVENT_READ, "listener")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        last_scan = time.monotonic()
        try:
            while not self._stop.is_set():
                timeout = 0.0 if self._ready or self._done else _SCAN_EVERY
                for key, mask in sel.select(timeout):
                    if key.data == "listener":
                        self._guarded(None, self._accept)
                    elif key.data == "wake":
                        self._drain_wake()
                    else:
                        conn = self._conns.get(key.fd)
                        if conn is not None:
                            self._guarded(conn, self._on_event, conn, mask)
                while self._done:
                    conn, reply = self._done.popleft()
                    if not conn.closed:
                        self._guarded(conn, self._start_reply, conn, reply or self._refusal())
                for _ in range(len(self._ready)):  # one request per connection per turn
                    conn = self._ready.popleft()
                    if not conn.closed and conn.state in (_READING, _IDLE):
                        self._guarded(conn, self._next_request, conn)
                now = time.monotonic()
                if now - last_scan >= _SCAN_EVERY:
                    last_scan = now
                    self._guarded(None, self._expire, now)
                    if self._accept_paused_until and now >= self._accept_paused_until:
                        self._accept_paused_until = 0.0
                        sel.register(self.listener, selectors.EVENT_READ, "listener")
        finally:
            for conn in list(self._conns.values()):
                self._close(conn)
            for obj in (self.listener, self._wake_r):
                try:
                    sel.unregister(obj)
                except (KeyError, ValueError):
                    pass
            self._stopped.set()

    def _guarded(self, conn: _Conn | None, step: Callable[..., None], *args: Any) -> None:
        """Run one step of the loop; an exception is logged, closes ``conn`` and is counted."""
        try:
            step(*args)
        except Exception as exc:  # noqa: BLE001 - logged; too many end the loop (see below)
            self.loop_errors += 1
            log.error("the HTTP connection loop failed handling %s; closing it and going on",
                      conn.address if conn is not None else "its bookkeeping", exc_info=True)
            if conn is not None:
                try:
                    self._close(conn)
                except Exception:  # noqa: BLE001
                    log.exception("closing the failed connection failed too")
            now = time.monotonic()
            self._errors.append(now)
            while self._errors and self._errors[0] < now - 60.0:
                self._errors.popleft()
            if len(self._errors) > self.limits.max_loop_errors:
                log.critical("the HTTP connection loop failed %d times in a minute; stopping it",
                             len(self._errors))
                raise exc

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop (from another thread) and wait for it to finish."""
        self._stop.set()
        self._wake()
        self._stopped.wait(timeout)

    def close(self) -> None:
        """Release the loop's own resources (after :meth:`stop`)."""
        self._auth.close()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

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
        except (KeyError, ValueError):
            pass
        self._accept_failures_unlogged += 1
        if now - self._accept_logged_at >= self.limits.log_every:
            log.warning("accept failed %d time(s) since the last report: %s; pausing new "
                        "connections for %g s at a time (raise LimitNOFILE?)",
                        self._accept_failures_unlogged, exc.strerror or exc,
                        self.limits.accept_backoff)
            self._accept_logged_at = now
            self._accept_failures_unlogged = 0

    def _admit(self, sock: socket.socket, address: Any) -> None:
        now = time.monotonic()
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        client = _client(address)
        if len(self._conns) >= self.limits.max_open and not self._make_room():
            self.refused += 1  # every open connection is being answered: none to evict
            _refuse(sock, plain=self.ssl_context is None)
            return
        refusing = self._per_client[client] >= self.limits.max_per_client
        tls = self.ssl_context is not None
        if tls:
            try:
                sock = self.ssl_context.wrap_socket(sock, server_side=True,  # type: ignore[union-attr]
                                                    do_handshake_on_connect=False)
            except (ssl.SSLError, OSError) as exc:
                log.debug("TLS setup for %s failed: %s", address, exc)
                sock.close()
                return
        conn = _Conn(sock, address, now, self.limits, tls, refusing)
        self._conns[sock.fileno()] = conn
        if not refusing:
            self._per_client[client] += 1
        self._watch(conn, selectors.EVENT_READ)
        if tls:
            self._handshake(conn)

    def _make_room(self) -> bool:
        """Close one connection of the address holding the most (its oldest head reader, else
        its longest idle, else its longest-stalled writer); whether one was closed."""
        candidates = [c for c in self._conns.values() if c.state != _WORKING]
        if not candidates:
            return False
        refusing = [c for c in candidates if c.refusing]
        if refusing:
            victim = min(refusing, key=lambda c: c.since)
        else:
            held = collections.Counter(c.client for c in candidates)
            heaviest = held.most_common(1)[0][0]
            mine = [c for c in candidates if c.client == heaviest]
            rank = {_HANDSHAKE: 0, _READING: 0, _IDLE: 1, _WRITING: 2}
            victim = min(mine, key=lambda c: (rank[c.state], c.since))
        self._evict(victim, "to make room for a new connection")
        return True

    def _evict(self, conn: _Conn, why: str) -> None:
        self.evicted += 1
        log.debug("closing the %s connection from %s (%s since %.1f s) %s", conn.state,
                  conn.address, conn.state, time.monotonic() - conn.since, why)
        self._close(conn)

    def _bound_head_readers(self, now: float) -> None:
        """Close the longest-waiting head readers above ``max_reading_per_client`` (per
        address) and ``max_reading`` (in total); only those waiting ``head_grace`` or more."""
        readers = [c for c in self._conns.values() if c.state in _HEAD_READERS]
        if len(readers) <= self.limits.max_reading_per_client:
            return
        readers.sort(key=lambda c: c.since)
        by_client: dict[str, list[_Conn]] = collections.defaultdict(list)
        for conn in readers:
            by_client[conn.client].append(conn)
        old = now - self.limits.head_grace
        left = len(readers)
        for mine in by_client.values():
            excess = len(mine) - self.limits.max_reading_per_client
            for conn in mine[:max(0, excess)]:
                if conn.since > old:
                    break
                self._evict(conn, "(too many head readers from its address)")
                left -= 1
        while left > self.limits.max_reading:
            heaviest = max(by_client, key=lambda c: sum(not x.closed for x in by_client[c]))
            oldest = next((c for c in by_client[heaviest] if not c.closed), None)
            if oldest is None or oldest.since > old:
                break
            self._evict(oldest, "(too many head readers)")
            left -= 1

    # -- events --------------------------------------------------------------

    def _on_event(self, conn: _Conn, mask: int) -> None:
        if conn.state == _HANDSHAKE:
            self._handshake(conn)
        elif conn.state in (_READING, _IDLE):
            self._read(conn)
        elif conn.state == _WRITING:
            self._write(conn)

    def _handshake(self, conn: _Conn) -> None:
        try:
            conn.sock.do_handshake()  # type: ignore[attr-defined]
        except ssl.SSLWantReadError:
            self._watch(conn, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._watch(conn, selectors.EVENT_WRITE)
            return
        except (ssl.SSLError, OSError) as exc:
            log.debug("TLS handshake with %s failed: %s", conn.address, exc)
            self._close(conn)
            return
        conn.state = _READING
        self._watch(conn, selectors.EVENT_READ)
        self._read(conn)

    def _read(self, conn: _Conn) -> None:
        sock = conn.sock
        try:
            while True:  # TLS: take what the TLS layer already decrypted, too
                data = sock.recv(self.limits.max_head_bytes)
                if not data:
                    self._close(conn)
                    return
                conn.buf += data
                if not isinstance(sock, ssl.SSLSocket) or not sock.pending():
                    break
        except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
            pass
        except ssl.SSLWantWriteError:
            self._watch(conn, selectors.EVENT_WRITE | selectors.EVENT_READ)
            return
        except (ssl.SSLError, OSError):
            self._close(conn)
            return
        self._next_request(conn)

    def _next_request(self, conn: _Conn) -> None:
        """Answer the first complete request in the buffer, if any (never more than one)."""
        if not conn.buf:
            return
        now = time.monotonic()
        if conn.state == _IDLE:  # the first byte of a request on a kept-alive connection
            conn.state = _READING
            conn.since = conn.head_started = now
            conn.deadline = min(conn.deadline, now + self.limits.header_timeout)
        end = _head_end(conn.buf)
        if end < 0 or end > self.limits.max_head_bytes:
            if end > 0 or len(conn.buf) > self.limits.max_head_bytes:
                self._start_reply(conn, Reply([HEAD_TOO_LARGE], True))
            else:
                self._watch(conn, selectors.EVENT_READ)  # the rest of the head is still to come
            return
        head = bytes(conn.buf[:end])
        del conn.buf[:end]
        conn.state = _WORKING
        self._unwatch(conn)  # not read again until this request is answered: back-pressure
        if conn.refusing:
            self._start_reply(conn, self._refusal())
            return
        try:
            reply = self.respond(head, conn.address, True)
        except Exception:  # noqa: BLE001 - one bad request must not stop the loop
            log.exception("answering a request from %s failed", conn.address)
            reply = Reply([REFUSED], True)
        if reply is not None:
            self._start_reply(conn, reply)
        elif not self._auth.submit(conn.client, (conn, head)):
            self._start_reply(conn, self._refusal())

    def _refusal(self) -> Reply:
        self.refused += 1
        return Reply([REFUSED], True)

    def _respond_slowly(self, job: tuple[_Conn, bytes]) -> None:
        conn, head = job
        try:
            reply = self.respond(head, conn.address, False)
        except Exception:  # noqa: BLE001
            log.exception("answering a request from %s failed", conn.address)
            reply = None
        self._finish_job(conn, reply)

    def _finish_job(self, conn: _Conn, reply: Reply | None) -> None:
        self._done.append((conn, reply))
        self._wake()

    def _start_reply(self, conn: _Conn, reply: Reply) -> None:
        conn.state = _WRITING
        chunks = [c for c in reply.chunks if c]
        if len(chunks) > 1 and sum(map(len, chunks)) <= _SEND_CHUNK:
            chunks = [b"".join(chunks)]  # headers and a small body leave in one segment
        conn.out = collections.deque(memoryview(c) for c in chunks)
        conn.close_after = reply.close
        conn.since = now = time.monotonic()
        conn.deadline = now + self.limits.write_timeout
        self._watch(conn, selectors.EVENT_WRITE)
        self._write(conn)

    def _write(self, conn: _Conn) -> None:
        sock = conn.sock
        try:
            while conn.out:
                view = conn.out[0]
                sent = sock.send(view[:_SEND_CHUNK])
                if sent:
                    conn.since = time.monotonic()  # progress: not "stalled" for _make_room
                if sent >= len(view):
                    conn.out.popleft()
                else:
                    conn.out[0] = view[sent:]
        except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError):
            return
        except ssl.SSLWantReadError:
            self._watch(conn, selectors.EVENT_READ | selectors.EVENT_WRITE)
            return
        except (ssl.SSLError, OSError):
            self._close(conn)
            return
        if conn.close_after:
            self._close(conn)
            return
        now = time.monotonic()
        conn.state = _IDLE
        conn.since = now
        conn.deadline = now + self.limits.idle_timeout
        conn.head_started = None
        if conn.buf:  # a pipelined request already arrived: its turn comes in the loop, and
            self._unwatch(conn)  # nothing more is read before it is answered (back-pressure)
            self._ready.append(conn)
        else:
            self._watch(conn, selectors.EVENT_READ)

    def _expire(self, now: float) -> None:
        for conn in list(self._conns.values()):
            if conn.state != _WORKING and now > conn.deadline and not conn.closed:
                self.timed_out += 1
                log.debug("closing %s connection from %s: deadline passed", conn.state, conn.address)
                self._close(conn)
        self._bound_head_readers(now)

    # -- plumbing ------------------------------------------------------------

    def _watch(self, conn: _Conn, events: int) -> None:
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

    def _unwatch(self, conn: _Conn) -> None:
        if conn.events:
            try:
                self._selector.unregister(conn.sock)
            except (KeyError, ValueError):
                pass
            conn.events = 0

    def _close(self, conn: _Conn) -> None:
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
            self._per_client[conn.client] -= 1
            if self._per_client[conn.client] <= 0:
                del self._per_client[conn.client]
        try:
            conn.sock.close()
        except OSError:
            pass

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, OSError):
            pass  # already awake (buffer full) or closed

    def _drain_wake(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass


def _refuse(sock: socket.socket, *, plain: bool) -> None:
    try:
        if plain:
            sock.send(REFUSED)
    except OSError:
        pass
    finally:
        sock.close()
