"""How one cycle's GPU reads are spread over the backend's reader threads.

NVML answers most calls in microseconds: handing each GPU to its own thread every cycle then
costs more (a wake-up and a GIL hand-off per GPU) than the reads themselves. A cycle's reads
therefore start on one reader thread, which takes the GPUs one after another from the cycle's
queue. The others join only when reading is slow:

* when the GPUs have not all been read :data:`HEDGE_SECONDS` after the cycle started (a GPU
  that hangs, a library that answers in milliseconds), the GPUs not yet started are taken by
  up to ``workers`` threads at once, so that a hung GPU holds up no other GPU;
* a cycle whose reads added up to more than :data:`HEDGE_SECONDS` makes the next one start on
  every thread at once (a slow library stays parallel; a fast one goes back to one thread).

The cycle's first reader is a thread of its own (:class:`FirstReader`), handed its work
through a plain lock (no pool task, no future). The caller does not wait to be woken by it:
woken by the reader's signal, the caller preempted the reader while that one still held the
interpreter lock, and both switched twice more for it (an idle exporter measured eight context
switches a second, three of them the reader's involuntary ones). The caller sleeps instead
through the time the last cycle's reads took (:data:`PAUSE_FACTOR` times it, at most half the
hedge), and finds them read: about three context switches a cycle, and 7 % less CPU for an idle
exporter (8 fake GPUs, side by side). Reads slower than that are waited for as before.

Each GPU is read at most once a cycle, by whichever thread takes it first. A GPU whose read is
still in the library from an earlier cycle is not queued again (``Gpu.pending``): it is
reported as not answering, like a GPU whose read misses the backend's timeout; one never
started by then is taken off the queue and asked afresh in the next cycle.
"""

from __future__ import annotations

import _thread
import collections
import threading
import time
from typing import TYPE_CHECKING, Callable, Generic, Sequence, TypeVar

from allsmi.backends.nvidia.devices import Gpu
from allsmi.support.lazylog import get_logger

if TYPE_CHECKING:  # made for the second cycle (see the module)
    from concurrent.futures import ThreadPoolExecutor

log = get_logger(__name__)

T = TypeVar("T")

#: How long a cycle's reads run on one thread before more threads take the GPUs left, and how
#: long a cycle's reads may add up to for the next cycle to start on one thread again.
HEDGE_SECONDS = 0.02
#: How much longer than the last cycle's reads the collector sleeps before waiting for a fast
#: cycle's reads (never more than half the hedge).
PAUSE_FACTOR = 1.3


class GpuRead(Generic[T]):
    """One GPU's read, handed to a reader thread (``Gpu.pending`` until its result is taken)."""

    __slots__ = ("result", "error", "finished")

    def __init__(self) -> None:
        self.result: T | None = None
        self.error: Exception | None = None
        self.finished = False

    def done(self) -> bool:
        """Whether the read has returned (a read stuck in the library has not)."""
        return self.finished


class FirstReader:
    """The thread that starts each cycle's reads: handed one task at a time through a lock
    (released to ring, acquired by the thread to wait), so that handing it work runs no Python
    beyond the release and its waiting none beyond the acquire."""

    def __init__(self, name: str) -> None:
        self._bell = _thread.allocate_lock()
        self._bell.acquire()  # held: nothing to do
        self._task: Callable[[], None] | None = None
        self.busy = False
        """Whether a task was handed over and has not returned (a read stuck in the library)."""
        self._closed = False
        self.thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self.thread.start()

    def hand(self, task: Callable[[], None]) -> bool:
        """Run ``task`` on the thread; ``False`` (and nothing run) while it is busy or closed."""
        if self.busy or self._closed:
            return False
        self.busy = True
        self._task = task
        self._bell.release()
        return True

    def close(self) -> None:
        """Let the thread end once its task (if any) returns."""
        self._closed = True
        if not self.busy:
            self.busy = True
            self._task = None
            self._bell.release()

    def _loop(self) -> None:
        bell = self._bell
        while True:
            bell.acquire()
            task, self._task = self._task, None
            if task is None:
                return
            try:
                task()
            except Exception:  # noqa: BLE001 - a read's own errors are its result; this is a bug
                log.exception("NVIDIA reader: a cycle's reads failed; its GPUs are reported as "
                              "not answering, the next cycle is read as usual")
            self.busy = False
            if self._closed:
                return


class ReaderPool:
    """The threads a :class:`ReadSchedule` hands its readers to, in place of a
    ``ThreadPoolExecutor`` (the same arguments, ``submit`` and ``shutdown``): in the first cycle
    a thread started for each reader, ending with it; after it, an executor of ``max_workers``
    threads, made at the first reader handed over and kept (see the module)."""

    def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
        self.max_workers = max_workers
        self.prefix = thread_name_prefix
        self.executor: ThreadPoolExecutor | None = None
        self._cycles = 0
        self._started = 0

    def begin_cycle(self) -> None:
        """A cycle starts (the first is read on threads of its own)."""
        self._cycles += 1

    def submit(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on a reader thread."""
        if self._cycles > 1:
            if self.executor is None:
                from concurrent.futures import ThreadPoolExecutor
                self.executor = ThreadPoolExecutor(max_workers=self.max_workers,
                                                   thread_name_prefix=self.prefix)
            self.executor.submit(fn)
            return
        # A daemon, as no thread waits for a first-cycle reader: one stuck in the library
        # must not hold up the process's exit (the executor's are joined at exit).
        threading.Thread(target=fn, daemon=True, name=f"{self.prefix}_{self._started}").start()
        self._started += 1

    def shutdown(self, wait: bool = False, *, cancel_futures: bool = False) -> None:
        """The executor's ``shutdown`` (the first cycle's threads end by themselves)."""
        if self.executor is not None:
            self.executor.shutdown(wait=wait, cancel_futures=cancel_futures)


class ReadSchedule(Generic[T]):
    """Reads a cycle's GPUs with ``read`` on ``pool`` (at most ``workers`` threads)."""

    def __init__(self, pool: ReaderPool, workers: int,
                 read: Callable[[Gpu], T]) -> None:
        self._pool = pool
        self._workers = max(1, workers)
        self._read = read
        self._lock = threading.Lock()
        self._outstanding = 0  # reads handed out and not returned: this cycle's, and stuck ones
        #: Held while reads are outstanding; released by the read that leaves none (a plain
        #: lock, not an ``Event``: see the module's docstring).
        self._reading = _thread.allocate_lock()
        self._first: FirstReader | None = None
        self._last_read = 0.0  # the last cycle's reads, added up, when it read on one thread
        self.parallel = False
        """Whether the next cycle starts on every thread at once (the last one was slow)."""
        self.threads_started = 0
        """Reader tasks handed to the pool so far (what a test counts: one a cycle while the
        library is fast)."""

    def run(self, gpus: Sequence[Gpu], timeout: float) -> list[T | None]:
        """Each GPU's result, in order; ``None`` for a GPU that did not answer within
        ``timeout`` seconds (or whose read from an earlier cycle is still in the library)."""
        started = time.monotonic()
        self._pool.begin_cycle()
        queue: collections.deque[Gpu] = collections.deque()
        for gpu in gpus:
            if gpu.pending is None:
                gpu.pending = GpuRead()
                queue.append(gpu)
        asked = len(queue)
        with self._lock:
            if asked and not self._outstanding:
                self._reading.acquire()  # free while nothing is outstanding
            self._outstanding += asked
        spent: list[float] = []

        def drain() -> None:
            while queue:
                try:
                    gpu = queue.popleft()  # atomic: each GPU goes to one thread
                except IndexError:
                    return
                read = gpu.pending
                begun = time.perf_counter()
                try:
                    result = self._read(gpu)
                except Exception as exc:  # the read never raises; a bug must not hang the cycle
                    if read is not None:
                        read.error = exc
                else:
                    if read is not None:
                        read.result = result
                spent.append(time.perf_counter() - begun)
                self._returned(read)

        if self.parallel or not asked:
            self._start(drain, min(asked, self._workers))
        else:
            self._start_first(drain)
            # Sleep through the time the last cycle's reads took before waiting for these: read
            # by then, they are taken without a wake-up from the reader (woken by its signal,
            # this thread preempted the reader, which still held the interpreter lock, and both
            # switched twice more for it: see the module's docstring).
            pause = min(self._last_read * PAUSE_FACTOR, HEDGE_SECONDS / 2, timeout)
            if pause > 0.0:
                time.sleep(pause)
            if not self._all_read(max(0.0, min(HEDGE_SECONDS, timeout) - pause)):
                self._start(drain, min(len(queue), self._workers - 1))  # slow, or a GPU hangs
        self._all_read(max(0.0, started + timeout - time.monotonic()))
        while True:  # never started: asked afresh next cycle, not read late
            try:
                gpu = queue.popleft()
            except IndexError:
                break
            gpu.pending = None
            self._returned(None)
        results: list[T | None] = []
        for gpu in gpus:
            read = gpu.pending
            if read is not None and read.finished:
                gpu.pending = None
                if read.error is not None:
                    raise read.error
                results.append(read.result)
            else:
                results.append(None)
        self.parallel = sum(spent) > HEDGE_SECONDS or None in results
        self._last_read = 0.0 if self.parallel else sum(spent)
        return results

    def close(self) -> None:
        """End the first reader's thread and the pool's (each once a read stuck in it
        returns); reads not started are dropped."""
        first, self._first = self._first, None
        if first is not None:
            first.close()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _all_read(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for no read to be outstanding."""
        if self._reading.acquire(True, timeout):
            self._reading.release()
            return True
        return False

    def _returned(self, read: GpuRead[T] | None) -> None:
        with self._lock:
            if read is not None:
                read.finished = True
            self._outstanding -= 1
            if self._outstanding == 0:
                self._reading.release()

    def _start_first(self, drain: Callable[[], None]) -> None:
        """``drain`` on the first reader; on the pool while that one is stuck in a read."""
        first = self._first
        if first is None:
            first = self._first = FirstReader("allsmi-nvml-first")
        if first.hand(drain):
            self.threads_started += 1
        else:
            self._start(drain, 1)

    def _start(self, drain: Callable[[], None], count: int) -> None:
        for _ in range(count):
            self._pool.submit(drain)
            self.threads_started += 1
