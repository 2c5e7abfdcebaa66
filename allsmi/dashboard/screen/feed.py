"""Data in: how the dashboard learns of new data (a mixin of :class:`DashboardApp`).

The local collector pushes: after each of its cycles it tells the app, which
reads that snapshot at once (one wake-up per cycle, no polling timer). A
watchdog fires only when no snapshot came for one and a half intervals, so a
stalled collector still shows its growing age. Sources without a push (remote
hosts, Prometheus, fixed frames) are read on a timer; network sources fetch in a
daemon thread, one round at a time, the next round armed only when the previous
one finished. Signals and other threads end the app through :meth:`quit_soon`.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from typing import Any, Sequence

from allsmi.support import heap

from allsmi.dashboard.state.idle import IdleMeter
from allsmi.dashboard.state.model import EnergyMeter, History, Retention, refs_of
from allsmi.dashboard.sources import HostState


class DataFeed:
    """Reading the source (``self`` is the :class:`~allsmi.dashboard.screen.app.DashboardApp`)."""

    # The app provides these (declared for readers and type checkers).
    source: Any
    clock: Any
    paused: bool
    hosts: list[HostState]
    history: History
    energy: EnergyMeter
    idle: IdleMeter
    poll_seconds: float
    refresh_error: str | None
    _signature: tuple[Any, ...] | None
    _refresh_started: float
    _refresh_cancel: threading.Event
    _loop: asyncio.AbstractEventLoop | None
    _app_context: contextvars.Context | None
    _device_retention: Retention
    _host_retention: Retention
    _watchdog: asyncio.TimerHandle | None = None
    _fed: tuple[Any, ...] | None = None
    """The hosts' signature last fed to the meters (:meth:`poll`)."""
    _trimmed = False

    def _start_feed(self) -> None:
        """Read the source now and from now on: on each push where the source pushes, else on
        a timer; network sources also start their refresh rounds."""
        app: Any = self
        self.poll()
        # Each refresh's rendering leaves garbage cycles and frees pages glibc keeps: collect
        # them and hand the pages back now and then (0.4-0.7 MiB less resident than the trim
        # alone, 1-2 ms a pass; allsmi/support/heap.py).
        app.set_interval(heap.TRIM_SECONDS, heap.release)
        subscribe = getattr(self.source, "subscribe", None)
        if subscribe is not None and subscribe(self._snapshot_ready):
            self._arm_watchdog(1.5 * self.source.interval)
        else:
            app.set_interval(self.poll_seconds, self.poll)
        if getattr(self.source, "fetches", True):
            self._start_refresh()

    def _snapshot_ready(self) -> None:
        """On the collector's thread: a new snapshot is there; the app reads it on its loop."""
        loop = self._loop
        if loop is None or loop.is_closed() or self._refresh_cancel.is_set():
            return
        try:
            loop.call_soon_threadsafe(self._on_push, context=self._app_context)
        except RuntimeError:  # the loop closed meanwhile: the app has ended
            pass

    def _on_push(self) -> None:
        self._poll_guarded()
        self._arm_watchdog(1.5 * self.source.interval)

    def _on_watchdog(self) -> None:
        """No snapshot for a while: redraw the age (and whatever came), then look again soon."""
        self._watchdog = None
        self._poll_guarded()
        self._arm_watchdog(self.poll_seconds)

    def _arm_watchdog(self, delay: float) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        loop = self._loop
        if self._refresh_cancel.is_set() or loop is None or loop.is_closed():
            return
        self._watchdog = loop.call_later(delay, self._on_watchdog, context=self._app_context)

    def _poll_guarded(self) -> None:
        """:meth:`poll` outside Textual's timers: an error ends the app with its traceback, as
        it would from a timer, instead of vanishing into the event loop's log."""
        try:
            self.poll()
        except Exception as error:  # noqa: BLE001 - handed to Textual, which shows and exits
            app: Any = self
            app._handle_exception(error)

    def quit_soon(self, signum: int) -> None:
        """End the app like `q`; safe from a signal handler and from any thread (the CLI's
        :class:`~allsmi.dashboard.screen.terminal.TerminalGuard` calls it on SIGHUP and SIGTERM)."""
        self._refresh_cancel.set()
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._quit_on_signal, signum, context=self._app_context)
        except RuntimeError:  # the loop closed meanwhile: the app has ended
            pass

    def _quit_on_signal(self, signum: int) -> None:
        self.quit_signal = signum
        self._refresh_cancel.set()
        self.exit()

    def poll(self) -> None:
        """Read the source (cheap, non-blocking) and redraw what changed."""
        if self._closing or self._closed or not self.screen_stack:
            return  # a timer that fires while the app shuts down: its widgets are going away
        hosts = list(self.source.hosts())
        # When the data arrived and the totals too: a host known by its totals alone (a large
        # Prometheus fleet) has no snapshot to change, yet is fresh with every answer.
        signature = tuple((h.key, id(h.snapshot), h.error, h.retry_at, h.received, id(h.summary))
                          for h in hosts)
        if signature != self._fed:
            # Paused or not: the screen freezes, the energy and idle time since start go on
            # (each meter ignores a snapshot it already has).
            self._fed = signature
            cluster = self.source.cluster
            for host in hosts:
                if host.snapshot is not None:
                    self.history.add(host.key, host.snapshot)
                    self.energy.add(host.key, host.snapshot)
                    self.idle.add(host.key, host.snapshot, now=time.time() if cluster else None)
        if signature != self._signature and not self.paused:
            self._signature = signature
            self.hosts = hosts
            self._forget_gone(hosts)
            self.refresh_view()
            if not self._trimmed and any(h.snapshot is not None for h in hosts):
                self._trimmed = True  # start-up is over once the first data is on screen
                app: Any = self
                app.call_after_refresh(heap.settle)
        self._update_summary()

    def _forget_gone(self, hosts: Sequence[HostState]) -> None:
        """Drop what is kept for devices and hosts no longer reported, after the grace
        (:data:`~allsmi.dashboard.state.model.GONE_GRACE_SECONDS`), so memory follows what is shown."""
        now = self.clock()
        gone = self._device_retention.update(
            (ref.key for h in hosts for ref in refs_of(h.key, h.snapshot)), now)
        if gone:
            self.history.drop(gone)
            self.energy.drop(gone)
        left = self._host_retention.update((h.key for h in hosts), now)
        if left:
            self.history.forget_hosts(left)
            self.energy.forget_hosts(left)
            self.idle.drop_hosts(left)

    def _start_refresh(self) -> None:
        if self._refresh_cancel.is_set():
            return
        self._refresh_started = time.monotonic()
        # A daemon thread, not a Textual thread worker: those run on the event loop's executor,
        # whose threads are joined when the loop closes, so a slow fetch would keep the process
        # alive after the screen was restored.
        threading.Thread(target=self._refresh_in_thread, daemon=True, name="allsmi-refresh").start()

    def _refresh_in_thread(self) -> None:
        error = None
        try:
            self.source.refresh(self._refresh_cancel.is_set)
        except Exception as exc:  # shown on the summary line; the next round tries again
            error = f"refresh failed: {type(exc).__name__}: {exc}"
        if self._refresh_cancel.is_set() or self._loop is None:
            return
        try:
            self._loop.call_soon_threadsafe(self._refresh_done, error, context=self._app_context)
        except RuntimeError:  # the loop is closed: the app has ended
            pass

    def _refresh_done(self, error: str | None) -> None:
        if self._refresh_cancel.is_set() or not self.is_running:
            return
        self.refresh_error = error
        self.poll()
        # Arm the next round only now, so rounds never overlap however slow one was.
        elapsed = time.monotonic() - self._refresh_started
        self.set_timer(max(0.05, self.source.interval - elapsed), self._start_refresh)

