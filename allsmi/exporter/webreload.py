"""The ``--web-config`` file read again when it, or a file it names, changes: a rotated
certificate or a changed password is in force without a restart (:class:`WebConfigWatcher`)."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any, Callable

from allsmi.exporter.webconfig import WebConfig, WebConfigError, load_web_config

log = logging.getLogger(__name__)


#: How often :class:`WebConfigWatcher` looks at its files (seconds).
WATCH_SECONDS = 1.0
#: How often it tries again while the last change did not load (seconds).
RETRY_SECONDS = 10.0

_Signature = tuple[Any, ...]


def _signature(files: tuple[Path, ...]) -> _Signature:
    """What changes when one of ``files`` is rewritten, replaced or removed (a Kubernetes
    secret volume swaps a symbolic link: the target's inode changes)."""
    out: list[Any] = []
    for file in files:
        try:
            st = file.stat()
        except OSError as exc:
            out.append(exc.errno)
        else:
            out.append((st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev))
    return tuple(out)


class WebConfigWatcher:
    """Reads the web configuration again when it, or a certificate, key or CA file it names,
    changes: a rotated certificate (cert-manager, a renewal cron) or a changed password is in
    force for the next connection, without a restart, as exporter-toolkit reads the file for
    every TLS handshake and request.

    :meth:`start` looks every :data:`WATCH_SECONDS` on a thread of its own (a reload builds
    a TLS context and a bcrypt hash: never on the connection loop's thread) and calls
    ``apply(new)`` with each configuration that loads. One that does not (a key that does not
    match its certificate yet, halfway through a rotation; malformed YAML) is logged, the one
    in use is kept, and :attr:`last_reload_ok` turns ``False`` (published as
    ``allsmi_exporter_web_config_last_reload_successful``) until a later change loads.
    Turning TLS on or off needs a restart: such a change is refused the same way.
    """

    def __init__(self, web: WebConfig, apply: Callable[[WebConfig], None], *,
                 every: float = WATCH_SECONDS) -> None:
        if web.path is None:
            raise ValueError("a web configuration read from a file is needed to watch it")
        self.path: Path = web.path
        self.web = web
        self.apply = apply
        self.every = every
        self.last_reload_ok = True
        self.reloads = 0
        """Configurations loaded and applied since start-up."""
        self.reload_errors = 0
        """Changes that did not load (the configuration in use was kept), each error once."""
        self._seen = _signature(web.files)
        self._retry_at = 0.0
        self._error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self, now: float | None = None) -> bool:
        """Reload if a file changed since the last look (or, while the last change did not
        load, every :data:`RETRY_SECONDS`: it may name a file that did not exist yet); whether
        a new configuration applies."""
        now = time.monotonic() if now is None else now
        before = _signature(self.web.files)
        if before == self._seen and (self.last_reload_ok or now < self._retry_at):
            return False
        self._seen = before  # tried once per change, not every second
        try:
            new = load_web_config(self.path)
            if (new.ssl_context is None) != (self.web.ssl_context is None):
                raise WebConfigError(f"{self.path}: turning TLS "
                                     f"{'on' if new.ssl_context else 'off'} needs a restart")
        except Exception as exc:  # noqa: BLE001 - any failure keeps the one in use, counted
            if not isinstance(exc, WebConfigError):  # (a defect: said as one, never a crash)
                exc = WebConfigError(f"{self.path}: {type(exc).__name__}: {exc}")
            self.last_reload_ok = False
            self._retry_at = now + RETRY_SECONDS
            if str(exc) != self._error:  # said once, not at every retry
                self.reload_errors += 1
                self._error = str(exc)
                log.error("web configuration not reloaded, the one in use is kept: %s", exc)
            return False
        self._error = ""
        if new.files != self.web.files:
            self._seen = _signature(new.files)
        self.web = new
        self.apply(new)
        self.last_reload_ok = True
        self.reloads += 1
        log.warning("web configuration %s reloaded", new.path)
        return True

    def start(self) -> None:
        """Watch on a daemon thread until :meth:`stop`."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="allsmi-web-config",
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.check()
            except Exception:  # noqa: BLE001 - the watcher outlives one bad look
                log.exception("watching the web configuration failed")

    def stop(self) -> None:
        """Stop watching (waits for a reload under way)."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(30.0)
