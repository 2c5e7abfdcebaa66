"""The password-check queue: bcrypt work shared fairly between client addresses.

A request whose ``Authorization`` header is not in the cache of recent
successes needs a bcrypt check (tens of milliseconds of CPU). The connection
loop never does that itself: it hands the request to :class:`FairQueue`,
whose worker threads take the waiting requests **round-robin by client
address**, one request of each waiting address in turn. So a flood of wrong
passwords from one address delays a scraper from another address by at most
one check per waiting address, never by the whole flood.

Addresses whose password check failed within :data:`SUSPECT_SECONDS` are *suspects*: the
workers serve every other address's requests first, and when the queue is full a request
from an address that is not a suspect takes the place of a suspect's newest request. So a
wrong-password flood from many addresses (each one a suspect after its first failure) delays
a valid scraper arriving from elsewhere by one check under way, not by one check per
flooding address, and never turns it away with ``503``.

Bounds: at most ``max_queued`` requests wait in total and at most
``max_queued_per_client`` from one address. When the queue is full, a request
from an address holding fewer than the address holding the most takes the
place of that address's newest waiting request (which is answered ``503``):
every address gets its fair share of the queue, whatever the others send.
At most :data:`MAX_SUSPECTS` suspects are remembered (the oldest forgotten first).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any, Callable, Deque, Dict

log = logging.getLogger(__name__)

#: How long an address whose password check failed is served after the others.
SUSPECT_SECONDS = 60.0
#: Suspect addresses remembered at most.
MAX_SUSPECTS = 4096

#: How long :meth:`FairQueue.close` waits for the checks under way (one bcrypt check each).
JOIN_SECONDS = 30.0


class FairQueue:
    """Runs ``job`` for submitted items on ``workers`` threads, round-robin by client.

    ``refuse(item)`` is called (on the submitting thread) for an item that
    gives up its place to another address's request.
    """

    def __init__(self, job: Callable[[Any], None], refuse: Callable[[Any], None], *, workers: int,
                 max_queued: int, max_queued_per_client: int, name: str = "allsmi-http-auth") -> None:
        self._job = job
        self._refuse = refuse
        self.max_queued = max_queued
        self.max_queued_per_client = max(1, min(max_queued_per_client, max_queued))
        self._queues: Dict[str, Deque[Any]] = {}
        self._turns: Deque[str] = collections.deque()  # clients with waiting items, next first
        self._suspect_turns: Deque[str] = collections.deque()  # the same, for suspects
        self._suspects: "collections.OrderedDict[str, float]" = collections.OrderedDict()
        self._waiting = 0
        self._cond = threading.Condition()
        self._closed = False
        self._name = name
        self._workers = max(1, workers)
        self._threads: list[threading.Thread] = []  # started on demand: none without basic auth

    def failed(self, client: str) -> None:
        """Note that a password check of ``client`` failed (it becomes a suspect)."""
        with self._cond:
            self._suspects[client] = time.monotonic()
            self._suspects.move_to_end(client)
            while len(self._suspects) > MAX_SUSPECTS:
                self._suspects.popitem(last=False)

    def _is_suspect(self, client: str) -> bool:
        failed_at = self._suspects.get(client)
        if failed_at is None:
            return False
        if time.monotonic() - failed_at < SUSPECT_SECONDS:
            return True
        del self._suspects[client]
        return False

    def _take_turn(self, client: str) -> None:
        (self._suspect_turns if self._is_suspect(client) else self._turns).append(client)

    def waiting(self) -> int:
        """How many items wait for a worker."""
        with self._cond:
            return self._waiting

    def submit(self, client: str, item: Any) -> bool:
        """Queue ``item`` for ``client``; ``False`` when it gets no place (answer it ``503``)."""
        displaced = None
        with self._cond:
            if self._closed:
                return False
            mine = self._queues.get(client)
            held = len(mine) if mine else 0
            if held >= self.max_queued_per_client:
                return False
            if self._waiting >= self.max_queued:
                suspects = [] if self._is_suspect(client) else \
                    [c for c in self._queues if self._is_suspect(c)]
                heaviest = max(suspects or self._queues, key=lambda c: len(self._queues[c]))
                if not suspects and len(self._queues[heaviest]) <= held + 1:
                    return False  # nobody holds more than this client would: the queue is fair
                displaced = self._queues[heaviest].pop()  # its newest: the oldest keep their turn
                self._waiting -= 1
                if not self._queues[heaviest]:
                    del self._queues[heaviest]  # its turn is skipped once it comes up
            if mine is None:
                mine = self._queues[client] = collections.deque()
                self._take_turn(client)
            mine.append(item)
            self._waiting += 1
            self._cond.notify()
            if len(self._threads) < self._workers:
                thread = threading.Thread(target=self._work, daemon=True,
                                          name=f"{self._name}-{len(self._threads)}")
                self._threads.append(thread)
                thread.start()
        if displaced is not None:
            self._refuse(displaced)
        return True

    def _next(self) -> Any:
        with self._cond:
            while not self._closed and not self._waiting:
                self._cond.wait()
            if self._closed:
                return None
            while True:  # those that are not suspects first
                client = (self._turns or self._suspect_turns).popleft()
                queue = self._queues.get(client)
                if queue:
                    break
            item = queue.popleft()
            self._waiting -= 1
            if queue:
                self._take_turn(client)  # its next item waits for every other client's turn
            else:
                del self._queues[client]
            return item

    def _work(self) -> None:
        while True:
            item = self._next()
            if item is None:
                return
            try:
                self._job(item)
            except Exception:  # noqa: BLE001 - a worker must outlive one bad request
                log.exception("a password check failed")

    def close(self, timeout: float = JOIN_SECONDS) -> bool:
        """Stop the workers and wait for them (items still waiting are dropped; their
        connections are closed); whether every worker ended within ``timeout`` seconds.

        A worker inside ``bcrypt.checkpw`` finishes that one check first. Waiting matters:
        a worker still inside bcrypt when the interpreter shuts down is killed in the middle
        of native code, and the process aborts (SIGABRT) instead of exiting."""
        with self._cond:
            self._closed = True
            self._queues.clear()
            self._turns.clear()
            self._suspect_turns.clear()
            self._waiting = 0
            self._cond.notify_all()
            threads = list(self._threads)
        deadline = time.monotonic() + timeout
        for thread in threads:
            if thread is not threading.current_thread():
                thread.join(max(0.0, deadline - time.monotonic()))
        alive = [t.name for t in threads if t.is_alive()]
        if alive:
            log.error("password-check worker(s) %s still running after %g s", ", ".join(alive),
                      timeout)
        return not alive
