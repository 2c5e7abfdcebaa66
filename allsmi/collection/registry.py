"""Finding backends through the ``allsmi.backends`` entry-point group.

Built-in and third-party backends register the same way (see
``pyproject.toml``). Listing names imports nothing; loading a backend imports
only its module, and that module imports its vendor library lazily. The
group is read by :mod:`allsmi.support.distinfo` (``importlib.metadata``'s rules without
its import cost, which would dominate ``allsmi snapshot``'s start-up), and by
``importlib.metadata`` where that module cannot tell or a caller needs the
distribution (``allsmi backends``).

A backend whose entry-point module declares its vendor without importing the backend class
(``DECLARATION`` and ``quick_probe(options)``: every built-in vendor package, see
:mod:`allsmi.backends._common.declared`) is constructed as a :class:`DeferredBackend`: its
class is imported only once its quick probe says the vendor may be present, so a machine
without that vendor never imports it.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from allsmi.support import distinfo
from allsmi.backend_api import Backend, BackendError, ProbeResult
from allsmi.schema.declarations import VendorDeclaration
from allsmi.support.lazylog import get_logger
from allsmi.schema import DeviceSample

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

log = get_logger(__name__)  # logging imported when first used (allsmi/support/lazylog.py)

GROUP = "allsmi.backends"

#: Backends that stand in for hardware rather than read it; not probed by default.
SIMULATION_BACKENDS = frozenset({"simulated"})


class UnknownBackend(LookupError):
    """No backend of that name is installed."""


def _entry_points(*, full: bool = False, clashes: "list[Any] | None" = None) -> "dict[str, Any]":
    """name -> entry point; ``full``: ``importlib.metadata``'s own (they carry ``.dist``);
    ``clashes`` gets each later entry point of a name taken by another target."""
    eps: Any = None if full else distinfo.entry_points(GROUP)
    if eps is None:
        # Imported here: importlib.metadata is costly.
        from importlib.metadata import entry_points
        eps = entry_points(group=GROUP)
    found: dict[str, Any] = {}
    for ep in eps:
        first = found.setdefault(ep.name, ep)  # first distribution wins on a clash
        if first is not ep and clashes is not None and first.value != ep.value:
            clashes.append(ep)
    return found


def _pick(eps: "dict[str, Any]", name: str) -> Any:
    if name not in eps:
        raise UnknownBackend(f"unknown backend {name!r}; installed: {', '.join(sorted(eps)) or 'none'}")
    return eps[name]


def names() -> list[str]:
    """Every registered backend name, sorted, without importing any of them."""
    return sorted(_entry_points())


def clashes() -> "list[EntryPoint]":
    """The entry points not loaded because another distribution registered their name first
    (``importlib.metadata``'s, with their ``dist``): each is said, never silently left out."""
    found: list[Any] = []
    _entry_points(full=True, clashes=found)
    return found


def hardware_names() -> list[str]:
    """Registered backends that read real hardware."""
    return [n for n in names() if n not in SIMULATION_BACKENDS]


def entry_point(name: str) -> "EntryPoint":
    """The entry point of ``name`` (``importlib.metadata``'s, with its ``dist``);
    :class:`UnknownBackend` lists what is installed."""
    return _pick(_entry_points(full=True), name)  # type: ignore[no-any-return]


def load(name: str, _eps: "dict[str, Any] | None" = None) -> type[Backend]:
    """Import and return the backend class registered as ``name`` (``_eps``: the group, if read)."""
    cls = _pick(_entry_points() if _eps is None else _eps, name).load()
    if not (isinstance(cls, type) and issubclass(cls, Backend)):
        raise TypeError(f"entry point {name!r} does not name a Backend subclass")
    return cls


def impersonated(name: str, _eps: "dict[str, Any] | None" = None) -> type[Backend] | None:
    """The backend class a simulation of ``name`` takes its declarations from; ``None`` when no
    backend of that name is installed or it cannot be imported (the simulation then says so)."""
    try:
        return load(name, _eps)
    except Exception:
        return None


def vendor_package(entry: Any) -> ModuleType | None:
    """The entry point's module where it declares its vendor without its backend class
    (``DECLARATION`` and ``quick_probe``), else ``None`` (importing it where it is not
    imported yet: :meth:`load` would import it anyway)."""
    module_name = str(entry.value).partition(":")[0].strip()
    try:
        module = importlib.import_module(module_name)
    except Exception:  # a broken plug-in: loading it says why
        return None
    declared = getattr(module, "DECLARATION", None)
    if isinstance(declared, VendorDeclaration) and callable(getattr(module, "quick_probe", None)):
        return module
    return None


def declarations(_eps: "dict[str, Any] | None" = None) -> tuple[VendorDeclaration, ...]:
    """What every installed hardware backend declares about its vendor, in name order (a
    vendor package's ``DECLARATION``, else the backend class's, its module imported; never a
    vendor library). A backend that cannot be imported declares nothing; ``allsmi doctor``
    and the collector report it."""
    eps = _entry_points() if _eps is None else _eps
    found = []
    for name in sorted(eps):
        if name in SIMULATION_BACKENDS:
            continue
        package = vendor_package(eps[name])
        if package is not None:
            found.append(package.DECLARATION)
            continue
        try:
            cls = load(name, eps)
        except Exception:  # a broken plug-in: reported where it runs
            continue
        found.append(cls.declaration())
    return tuple(found)


def instantiate(enabled: "list[str] | tuple[str, ...] | None" = None, *, timeout_seconds: float = 5.0,
                options: "dict[str, Any] | None" = None,
                simulate: "Any | None" = None,
                clock: "Callable[[], float] | None" = None) -> list[Backend]:
    """Construct the backends to run.

    With ``simulate`` (a built-in scenario name, a scenario file path or a loaded
    scenario) the hardware backends are replaced by the simulated ones the scenario
    describes (those ``enabled`` names, when it is given). Otherwise every enabled hardware backend is constructed (not
    opened). Backend tool timeouts are set a little below ``timeout_seconds``
    so tools are killed before the collector gives up on them.
    """
    tool_timeout = max(0.05, timeout_seconds * 0.8)
    clashes: list[Any] = []
    eps = _entry_points(clashes=clashes)  # read once for every backend below
    if simulate is not None:
        from allsmi.backends.simulated import simulated_backends
        # Each simulated backend follows the declarations of the installed backend it impersonates,
        # and ``[backends] enabled`` picks among them as it picks among the hardware backends.
        return enabled_only(simulated_backends(simulate, timeout_seconds=tool_timeout,
                                               impersonate=lambda name: impersonated(name, eps),
                                               **({"clock": clock} if clock else {})), enabled)
    opts = options or {}
    out: list[Backend] = []
    for name in (enabled if enabled is not None else
                 [n for n in sorted(eps) if n not in SIMULATION_BACKENDS]):
        package = vendor_package(_pick(eps, name))
        if package is not None:
            out.append(DeferredBackend(name, eps[name], package, timeout_seconds=tool_timeout,
                                       options=opts.get(name)))
            continue
        try:
            cls = load(name, eps)
        except UnknownBackend:
            raise
        except Exception as exc:  # a broken plug-in must not take the others down
            out.append(BrokenBackend(name, f"cannot load backend: {type(exc).__name__}: {exc}"))
            continue
        out.append(cls(timeout_seconds=tool_timeout, options=opts.get(name)))
    for ep in clashes:  # a plug-in named as another backend is not run: said, not silent
        if ep.name in (enabled if enabled is not None else eps.keys() - SIMULATION_BACKENDS):
            out.append(BrokenBackend(f"{ep.name} ({ep.value})", f"not loaded: the backend name "
                                     f"{ep.name!r} is taken by {eps[ep.name].value}"))
    return out


def enabled_only(backends: "Any", enabled: "list[str] | tuple[str, ...] | None") -> list[Backend]:
    """``backends`` whose name ``enabled`` lists (all of them when ``enabled`` is ``None``); a
    simulated backend goes by the name of the backend it stands for (``display_name``)."""
    return [b for b in backends if enabled is None or b.display_name in enabled]


class BrokenBackend(Backend):
    """Stands in for a backend whose module failed to import; reports the error each cycle."""

    name = "broken"

    def __init__(self, registered_name: str, message: str) -> None:
        super().__init__()
        self._registered_name = registered_name
        self._message = message

    @property
    def display_name(self) -> str:
        return self._registered_name

    def probe(self) -> ProbeResult:
        return ProbeResult(True, "", {"error": self._message})

    def open(self) -> None:
        raise BackendError(self._message)

    def sample(self) -> list[DeviceSample]:
        raise BackendError(self._message)


class DeferredBackend(Backend):
    """Stands in for a backend whose class is imported only once its vendor may be present.

    Its vendor package answers :meth:`quick_probe` (files and ``PATH``, with the backend's
    options) and :meth:`declaration` without the class, and :meth:`probe` too where the quick
    probe says absent. From the first probe that cannot say so on, the class is imported and
    built with the same arguments, and every call goes to it; a class that cannot be imported
    is reported as :class:`BrokenBackend` reports it.
    """

    def __init__(self, registered_name: str, entry: Any, package: ModuleType, *,
                 timeout_seconds: float = 5.0, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(timeout_seconds=timeout_seconds, options=options)
        self._registered_name = registered_name
        self._entry = entry
        self._package = package
        self._declared: VendorDeclaration = package.DECLARATION
        self.backend: Backend | None = None
        """The real backend, once built."""
        self._failure = ""

    def declaration(self) -> VendorDeclaration:  # type: ignore[override]  # per instance
        """The vendor package's declaration (the class's, without importing it)."""
        return self._declared

    @property
    def display_name(self) -> str:
        return self.backend.display_name if self.backend is not None else self._registered_name

    def _real(self) -> Backend:
        if self.backend is None:
            if self._failure:
                raise BackendError(self._failure)
            try:
                cls = self._entry.load()
                if not (isinstance(cls, type) and issubclass(cls, Backend)):
                    raise TypeError(f"entry point {self._registered_name!r} does not name a Backend subclass")
                self.backend = cls(timeout_seconds=self.timeout_seconds, options=self.options)
            except Exception as exc:  # a broken backend must not take the others down
                self._failure = f"cannot load backend: {type(exc).__name__}: {exc}"
                raise BackendError(self._failure) from exc
        return self.backend

    def quick_probe(self) -> ProbeResult | None:
        if self.backend is not None:
            return self.backend.quick_probe()
        try:
            result = self._package.quick_probe(self.options)
        except Exception:  # noqa: BLE001 - leave the question to probe(), on the worker thread
            log.exception("backend %s: quick_probe failed", self._registered_name)
            return None
        return result if isinstance(result, ProbeResult) and not result.available else None

    def probe(self) -> ProbeResult:
        if self.backend is None and (absent := self.quick_probe()) is not None:
            return absent  # the backend's own answer, without importing it
        try:
            backend = self._real()
        except BackendError as exc:  # open() raises it again, and the status shows it
            return ProbeResult(True, "", {"error": str(exc)})
        return backend.probe()

    def open(self) -> None:
        self._real().open()

    @property
    def sample_isolated(self) -> bool:
        return self.backend is not None and self.backend.sample_isolated

    @property
    def fresh_samples(self) -> bool:
        """The real backend's ``fresh_samples`` (see ``allsmi.collection.collector._Completing``)."""
        return self.backend is not None and bool(getattr(self.backend, "fresh_samples", False))

    def sample(self) -> Sequence[DeviceSample]:
        backend = self._real()
        backend.warnings = self.warnings
        try:
            return backend.sample()
        finally:
            self.warnings = backend.warnings

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()
