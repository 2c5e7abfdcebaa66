"""The exporter's connection loop: slow clients cost a socket, never a scrape.

One thread owns every socket. It accepts at once, performs TLS handshakes and
reads request heads without blocking, and writes the prepared response bytes
without blocking; a request whose answer needs real work (a bcrypt password
check) is answered by a small thread pool instead, so that password guessing
cannot stall the loop. The design answers slow-loris attacks:

* **a whole-request deadline**: a new connection must complete its TLS
  handshake, request line and headers within ``header_timeout`` seconds of
  being accepted; on a kept-alive connection the next request may wait
  ``idle_timeout`` seconds for its first byte, then must be complete within
  ``header_timeout``. Dribbling one byte at a time does not extend anything;
* **bounded head readers, the oldest evicted**: only connections that are
  waiting for a request head count against ``max_reading`` (in total) and
  ``max_reading_per_client`` (per client address). When a new connection
  arrives and a bound is reached, the connection of that address (or, for the
  total bound, of the address holding the most) that has waited longest for
  its head is closed. A scraper that sends its request promptly after
  connecting is therefore always read, even while a hundred slow connections
  from its own address are open: it is the newest, never the oldest;
* **a whole-response deadline**: a response must be taken by the client
  within ``write_timeout`` seconds;
* a hard bound on all open connections (``max_open``) and on requests waiting
  for the thread pool (``max_queued``): beyond them a client gets an
  immediate ``503`` and the connection is closed.
"""

from __future__ import annotations

import collections
import logging
import selectors
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Deque, Optional

log = logging.getLogger(__name__)

REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
           b"Content-Length: 17\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
           b"server too busy\r\n")
HEAD_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n"
                  b"Connection: close\r\n\r\n")
_SEND_CHUNK = 256 * 1024
_SCAN_EVERY = 0.1


@dataclass(frozen=True)
class Limits:
    """The bounds of the connection loop (see the module docstring)."""

    header_timeout: float = 5.0
    idle_timeout: float = 10.0
    write_timeout: float = 10.0
    max_reading: int = 64
    max_reading_per_client: int = 16
    max_open: int = 1024
    max_head_bytes: int = 64 * 1024
    workers: int = 4
    max_queued: int = 64


@dataclass
class Reply:
    """What to send back: the bytes, and whether to close the connection afterwards."""

    chunks: list[bytes]
    close: bool


#: ``respond(head, client_address, fast)``: the reply, or ``None`` when ``fast`` and the
#: request needs the thread pool (then it is called again there with ``fast=False``).
Responder = Callable[[bytes, Any, bool], Optional[Reply]]

_HANDSHAKE, _READING, _WORKING, _WRITING = "handshake", "reading", "working", "writing"


class _Conn:
    __slots__ = ("sock", "address", "client", "state", "buf", "out", "close_after", "since",
                 "deadline", "head_started", "events")

    def __init__(self, sock: socket.socket, address: Any, now: float, limits: Limits,
                 tls: bool) -> None:
        self.sock = sock
        self.address = address
        self.client = address[0] if isinstance(address, tuple) and address else str(address)
        self.state = _HANDSHAKE if tls else _READING
        self.buf = bytearray()
        self.out: Deque[memoryview] = collections.deque()
        self.close_after = False
        self.since = now  # when it began waiting for the current request head
        self.deadline = now + limits.header_timeout
        self.head_started: float | None = now
        self.events = 0


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
        self.limits = limits or Limits()
        self.evicted = 0
        """Connections closed to make room for newer ones (slow or idle head readers)."""
        self.timed_out = 0
        """Connections closed at a deadline (request head or response not done in time)."""
        self.refused = 0
        """Connections or requests answered 503 at a hard bound."""
        self._selector = selectors.DefaultSelector()
        self._conns: dict[int, _Conn] = {}
        self._done: Deque[tuple[_Conn, Reply | None]] = collections.deque()
        self._queued = 0
        self._pool = ThreadPoolExecutor(max_workers=self.limits.workers,
                                        thread_name_prefix="allsmi-http-auth")
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        listener.setblocking(False)

    # -- running -------------------------------------------------------------

    def serve_forever(self) -> None:
        """Run the loop in the calling thread until :meth:`stop` is called."""
        self._stopped.clear()
        sel = self._selector
        sel.register(self.listener, selectors.EVENT_READ, "listener")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        last_scan = time.monotonic()
        try:
            while not self._stop.is_set():
                for key, mask in sel.select(_SCAN_EVERY):
                    if key.data == "listener":
                        self._accept()
                    elif key.data == "wake":
                        self._drain_wake()
                    else:
                        conn = self._conns.get(key.fd)
                        if conn is not None:
                            self._on_event(conn, mask)
                while self._done:
                    conn, reply = self._done.popleft()
                    self._queued -= 1
                    if conn.sock.fileno() in self._conns:
                        self._start_reply(conn, reply or Reply([REFUSED], True))
                now = time.monotonic()
                if now - last_scan >= _SCAN_EVERY:
                    last_scan = now
                    self._expire(now)
        finally:
            for conn in list(self._conns.values()):
                self._close(conn)
            for obj in (self.listener, self._wake_r):
                try:
                    sel.unregister(obj)
                except (KeyError, ValueError):
                    pass
            self._stopped.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the loop (from another thread) and wait for it to finish."""
        self._stop.set()
        self._wake()
        self._stopped.wait(timeout)

    def close(self) -> None:
        """Release the loop's own resources (after :meth:`stop`)."""
        self._pool.shutdown(wait=False, cancel_futures=True)
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
            except OSError as exc:  # EMFILE and friends: keep serving the open ones
                log.warning("accept failed: %s", exc)
                return
            self._admit(sock, address)

    def _admit(self, sock: socket.socket, address: Any) -> None:
        now = time.monotonic()
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        client = address[0] if isinstance(address, tuple) and address else str(address)
        self._make_room(client)
        if len(self._conns) >= self.limits.max_open and not self._make_room(client, force=True):
            self.refused += 1  # every open connection is being answered: none to evict
            _refuse(sock, plain=self.ssl_context is None)
            return
        tls = self.ssl_context is not None
        if tls:
            try:
                sock = self.ssl_context.wrap_socket(sock, server_side=True,  # type: ignore[union-attr]
                                                    do_handshake_on_connect=False)
            except (ssl.SSLError, OSError) as exc:
                log.debug("TLS setup for %s failed: %s", address, exc)
                sock.close()
                return
        conn = _Conn(sock, address, now, self.limits, tls)
        self._conns[sock.fileno()] = conn
        self._watch(conn, selectors.EVENT_READ)
        if tls:
            self._handshake(conn)

    def _make_room(self, client: str, force: bool = False) -> bool:
        """Evict the longest-waiting head reader when a bound on head readers is reached
        (``force``: in any case, to stay under ``max_open``); whether one was evicted."""
        readers = [c for c in self._conns.values() if c.state in (_HANDSHAKE, _READING)]
        mine = [c for c in readers if c.client == client]
        victims: list[_Conn] = []
        if len(mine) >= self.limits.max_reading_per_client:
            victims = mine
        elif readers and (force or len(readers) >= self.limits.max_reading):
            by_client = collections.Counter(c.client for c in readers)
            heaviest = by_client.most_common(1)[0][0]
            victims = [c for c in readers if c.client == heaviest]
        if not victims:
            return False
        oldest = min(victims, key=lambda c: c.since)
        self.evicted += 1
        log.debug("evicting the head reader from %s waiting since %.1f s", oldest.address,
                  time.monotonic() - oldest.since)
        self._close(oldest)
        return True

    # -- events --------------------------------------------------------------

    def _on_event(self, conn: _Conn, mask: int) -> None:
        if conn.state == _HANDSHAKE:
            self._handshake(conn)
        elif conn.state == _READING:
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
            while True:
                data = sock.recv(65536)
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
        self._after_read(conn)

    def _after_read(self, conn: _Conn) -> None:
        if not conn.buf:
            return
        now = time.monotonic()
        if conn.head_started is None:  # the first byte of a request on a kept-alive connection
            conn.head_started = now
            conn.deadline = min(conn.deadline, now + self.limits.header_timeout)
        end = _head_end(conn.buf)
        if end < 0:
            if len(conn.buf) > self.limits.max_head_bytes:
                self._start_reply(conn, Reply([HEAD_TOO_LARGE], True))
            return
        if end > self.limits.max_head_bytes:
            self._start_reply(conn, Reply([HEAD_TOO_LARGE], True))
            return
        head = bytes(conn.buf[:end])
        del conn.buf[:end]
        conn.state = _WORKING
        self._unwatch(conn)
        try:
            reply = self.respond(head, conn.address, True)
        except Exception:  # noqa: BLE001 - one bad request must not stop the loop
            log.exception("answering a request from %s failed", conn.address)
            reply = Reply([REFUSED], True)
        if reply is not None:
            self._start_reply(conn, reply)
            return
        if self._queued >= self.limits.max_queued:
            self.refused += 1
            self._start_reply(conn, Reply([REFUSED], True))
            return
        self._queued += 1
        self._pool.submit(self._respond_slowly, conn, head)

    def _respond_slowly(self, conn: _Conn, head: bytes) -> None:
        try:
            reply = self.respond(head, conn.address, False)
        except Exception:  # noqa: BLE001
            log.exception("answering a request from %s failed", conn.address)
            reply = None
        self._done.append((conn, reply))
        self._wake()

    def _start_reply(self, conn: _Conn, reply: Reply) -> None:
        conn.state = _WRITING
        chunks = [c for c in reply.chunks if c]
        if len(chunks) > 1 and sum(map(len, chunks)) <= _SEND_CHUNK:
            chunks = [b"".join(chunks)]  # headers and a small body leave in one segment
        conn.out = collections.deque(memoryview(c) for c in chunks)
        conn.close_after = reply.close
        conn.deadline = time.monotonic() + self.limits.write_timeout
        self._watch(conn, selectors.EVENT_WRITE)
        self._write(conn)

    def _write(self, conn: _Conn) -> None:
        sock = conn.sock
        try:
            while conn.out:
                view = conn.out[0]
                sent = sock.send(view[:_SEND_CHUNK])
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
        conn.state = _READING
        conn.since = now
        conn.deadline = now + self.limits.idle_timeout
        conn.head_started = None
        self._watch(conn, selectors.EVENT_READ)
        if conn.buf:  # a pipelined request already arrived
            self._after_read(conn)

    def _expire(self, now: float) -> None:
        for conn in list(self._conns.values()):
            if conn.state != _WORKING and now > conn.deadline:
                self.timed_out += 1
                log.debug("closing %s connection from %s: deadline passed", conn.state, conn.address)
                self._close(conn)

    # -- plumbing ------------------------------------------------------------

    def _watch(self, conn: _Conn, events: int) -> None:
        if conn.events == events:
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
        self._unwatch(conn)
        try:
            fd = conn.sock.fileno()
        except OSError:
            fd = -1
        if self._conns.get(fd) is conn:
            del self._conns[fd]
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
