"""The exporter's connection loop: slow or hostile clients cost a socket, never a scrape.

One thread owns every socket. It accepts at once, performs TLS handshakes and
reads request heads without blocking, and writes the prepared response bytes
without blocking; a request whose answer needs real work (a bcrypt password
check) goes to :class:`allsmi.exporter.authqueue.FairQueue` instead, so that
password guessing cannot stall the loop. The bounds it enforces (deadlines,
head readers, kept-alive connections, per-address and total connection caps)
are described and chosen in :mod:`allsmi.exporter.bounds`; the open connections
are admitted, watched, evicted and closed by :class:`allsmi.exporter.sockets.ConnectionTable`,
which this loop extends. Besides them:

* **pipelining is served in order, one request at a time**: a connection is
  not read while it has a request being answered, and one read takes at most
  ``max_head_bytes``, so the requests waiting on one connection are bounded
  (the rest wait in the kernel: TCP back-pressure). Connections with waiting
  requests take turns, one request each per turn, without recursion;
* **failures are loud**: ``accept`` failing for lack of descriptors (EMFILE)
  pauses accepting for ``accept_backoff`` seconds and is logged once per
  ``log_every``; an exception while handling a connection is logged, that
  connection is closed and the loop goes on; more than ``max_loop_errors``
  such exceptions within a minute end :meth:`ConnectionLoop.serve_forever`
  with the exception (``allsmi serve`` then exits 1 for its supervisor to
  restart it).
"""

from __future__ import annotations

import collections
import logging
import selectors
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Deque, Optional

from allsmi.exporter.authqueue import FairQueue
from allsmi.exporter.request import head_end, request_start
from allsmi.exporter.bounds import (HANDSHAKE, IDLE, LINGERING, READING, WORKING, WRITING, Conn,
                                    Limits)
from allsmi.exporter.sockets import REFUSED, ConnectionTable

log = logging.getLogger(__name__)

HEAD_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Length: 0\r\n"
                  b"Connection: close\r\n\r\n")
_SEND_CHUNK = 256 * 1024
_SCAN_EVERY = 0.1


@dataclass
class Reply:
    """What to send back: the bytes, and whether to close the connection afterwards."""

    chunks: list[bytes]
    close: bool
    status: int = 0
    """The HTTP status, where the responder says it (a 401 makes its address a suspect of
    :class:`~allsmi.exporter.authqueue.FairQueue`)."""


_FAILED_BODY = b"the exporter failed answering this request: its log says why\n"
#: The answer to a request whose answering raised (logged with its traceback): ``500``, never
#: the ``503`` "server too busy" of a bound, which would send an operator looking for a load.
FAILED = Reply([b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain; charset=utf-8\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(_FAILED_BODY)
                + _FAILED_BODY], True, 500)

#: What ``respond`` returns, when ``fast``, for a request that waits only for work that every
#: such request shares (the cycle's rendering, done once however many ask): it waits beside the
#: others for one turn of the thread pool, not in the password checks' queue, whose bound per
#: address would answer ``503`` to the seventeenth scraper behind one address while a rendering
#: is under way. A marker, never sent.
SHARED = Reply([], False)
#: The password checks' queue's client and item for the turn that answers the shared waiters.
_SHARED_CLIENT, _SHARED_TURN = "(shared work)", object()

#: ``respond(head, client_address, fast)``: the reply; or, when ``fast``, ``None`` for a request
#: that needs the thread pool (then it is called again there with ``fast=False``) or
#: :data:`SHARED` (called again there with ``fast=False``, in one turn with the others waiting).
Responder = Callable[[bytes, Any, bool], Optional[Reply]]


class ConnectionLoop(ConnectionTable):
    """Serves ``listener`` until :meth:`stop`; see the module docstring."""

    def __init__(self, listener: socket.socket, respond: Responder, *,
                 ssl_context: ssl.SSLContext | None = None, limits: Limits | None = None) -> None:
        super().__init__(listener, ssl_context=ssl_context,
                         limits=limits or Limits.for_this_process())
        self.respond = respond
        self.loop_errors = 0
        """Exceptions caught in the loop (each logged; its connection closed)."""
        self._ready: Deque[Conn] = collections.deque()  # may hold a complete request to answer
        self._done: Deque[tuple[Conn, Reply | None]] = collections.deque()
        self._shared: list[tuple[Conn, bytes]] = []  # waiting for shared work (:data:`SHARED`)
        self._shared_turn = False  # whether a turn for them is queued or under way
        self.shared_waits = 0
        """Requests that waited for shared work so far (:data:`SHARED`)."""
        self._shared_lock = threading.Lock()
        self._auth = FairQueue(self._respond_slowly, self._refuse_job,
                               workers=self.limits.workers, max_queued=self.limits.max_queued,
                               max_queued_per_client=self.limits.max_queued_per_client)
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._stopped.set()
        self._errors: Deque[float] = collections.deque()

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
                # With no connection and accepting not paused there is nothing to expire or
                # resume: sleep until the listener or the wake pipe stirs (an idle exporter
                # woke ten times a second for nothing).
                timeout = 0.0 if self._ready or self._done else \
                    _SCAN_EVERY if self._conns or self._accept_paused_until else None
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
                    if not conn.closed and conn.state in (READING, IDLE):
                        self._guarded(conn, self._next_request, conn)
                now = time.monotonic()
                if now - last_scan >= _SCAN_EVERY:
                    last_scan = now
                    self._guarded(None, self._expire, now)
                    self._guarded(None, self._resume_accepting, now)
        finally:
            for conn in list(self._conns.values()):
                self._close(conn)
            for obj in (self.listener, self._wake_r):
                try:
                    sel.unregister(obj)
                except (KeyError, ValueError):
                    pass
            self._stopped.set()

    def _guarded(self, conn: Conn | None, step: Callable[..., None], *args: Any) -> None:
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

    def close(self) -> bool:
        """Release the loop's own resources (after :meth:`stop`), waiting for the password
        checks under way; whether they all ended (see :meth:`FairQueue.close`)."""
        ended = self._auth.close()
        super().close()
        return ended

    # -- accepting -----------------------------------------------------------

    def _admit(self, sock: socket.socket, address: Any) -> Conn | None:
        conn = super()._admit(sock, address)
        if conn is not None and conn.state == HANDSHAKE:
            self._handshake(conn)
        return conn

    # -- events --------------------------------------------------------------

    def _on_event(self, conn: Conn, mask: int) -> None:
        if conn.state == HANDSHAKE:
            self._handshake(conn)
        elif conn.state in (READING, IDLE):
            self._read(conn)
        elif conn.state == WRITING:
            self._write(conn)
        elif conn.state == LINGERING:
            self._drain(conn)

    def _handshake(self, conn: Conn) -> None:
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
        conn.state = READING
        self._watch(conn, selectors.EVENT_READ)
        self._read(conn)

    def _read(self, conn: Conn) -> None:
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

    def _next_request(self, conn: Conn) -> None:
        """Answer the first complete request in the buffer, if any (never more than one)."""
        if not conn.buf:
            return
        # Empty lines before a request line are ignored (RFC 9112 section 2.2) but count against
        # the head's size; alone, they neither start a request nor put off any deadline.
        start = request_start(conn.buf)
        now = time.monotonic()
        if conn.state == IDLE and start >= 0:  # a request's first byte on a kept-alive connection
            conn.state = READING
            conn.since = conn.head_started = now
            conn.deadline = min(conn.deadline, now + self.limits.header_timeout)
        end = head_end(conn.buf, start) if start >= 0 else -1
        if end < 0 or end > self.limits.max_head_bytes:
            if end > 0 or len(conn.buf) > self.limits.max_head_bytes:
                self._start_reply(conn, Reply([HEAD_TOO_LARGE], True))
            else:
                self._watch(conn, selectors.EVENT_READ)  # the rest of the head is still to come
            return
        head = bytes(conn.buf[start:end])
        del conn.buf[:end]
        conn.state = WORKING
        self._unwatch(conn)  # not read again until this request is answered: back-pressure
        if conn.refusing:
            self._start_reply(conn, self._refusal())
            return
        try:
            reply = self.respond(head, conn.address, True)
        except Exception:  # noqa: BLE001 - one bad request must not stop the loop
            log.exception("answering a request from %s failed", conn.address)
            reply = FAILED
        if reply is SHARED:
            self._wait_shared(conn, head)
        elif reply is not None:
            self._start_reply(conn, reply)
        elif not self._auth.submit(conn.client, (conn, head)):
            self._start_reply(conn, self._refusal())

    def _wait_shared(self, conn: Conn, head: bytes) -> None:
        """Park a request waiting for shared work; the first one parked queues their turn."""
        with self._shared_lock:
            self._shared.append((conn, head))
            self.shared_waits += 1
            if self._shared_turn:
                return
            self._shared_turn = True
        if not self._auth.submit(_SHARED_CLIENT, _SHARED_TURN):
            self._refuse_job(_SHARED_TURN)

    def _answer_shared(self) -> None:
        """The shared waiters' turn (on the pool): the first answer does the work (renders),
        the others take its result; requests parked meanwhile are answered in the same turn."""
        while True:
            with self._shared_lock:
                batch, self._shared = self._shared, []
                if not batch:
                    self._shared_turn = False
                    return
            for job in batch:
                self._respond_slowly(job)

    def _refuse_job(self, job: Any) -> None:
        """A queued item turned away (the queue full): its request, or every shared waiter,
        answered ``503``."""
        if job is not _SHARED_TURN:
            self._finish_job(job[0], None)
            return
        with self._shared_lock:
            batch, self._shared, self._shared_turn = self._shared, [], False
        for conn, _ in batch:
            self._finish_job(conn, None)

    def _refusal(self) -> Reply:
        self.refused += 1
        return Reply([REFUSED], True)

    def _respond_slowly(self, job: Any) -> None:
        if job is _SHARED_TURN:
            self._answer_shared()
            return
        conn, head = job
        try:
            reply = self.respond(head, conn.address, False)
        except Exception:  # noqa: BLE001
            log.exception("answering a request from %s failed", conn.address)
            reply = FAILED
        if reply is not None and reply.status == 401:
            self._auth.failed(conn.client)  # its next checks wait for everybody else's
        self._finish_job(conn, reply)

    def _finish_job(self, conn: Conn, reply: Reply | None) -> None:
        self._done.append((conn, reply))
        self._wake()

    def _start_reply(self, conn: Conn, reply: Reply) -> None:
        conn.state = WRITING
        chunks = [c for c in reply.chunks if c]
        if len(chunks) > 1 and sum(map(len, chunks)) <= _SEND_CHUNK:
            chunks = [b"".join(chunks)]  # headers and a small body leave in one segment
        conn.out = collections.deque(memoryview(c) for c in chunks)
        conn.close_after = reply.close
        conn.since = now = time.monotonic()
        conn.deadline = now + self.limits.write_timeout
        self._watch(conn, selectors.EVENT_WRITE)
        self._write(conn)

    def _write(self, conn: Conn) -> None:
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
            self._linger(conn)
            return
        now = time.monotonic()
        conn.state = IDLE
        conn.since = now
        conn.deadline = now + self.limits.idle_timeout
        conn.head_started = None
        if conn.buf:  # a pipelined request already arrived: its turn comes in the loop, and
            self._unwatch(conn)  # nothing more is read before it is answered (back-pressure)
            self._ready.append(conn)
        else:
            self._watch(conn, selectors.EVENT_READ)
